"""`summarize dashboard`: its JSON, its read-only connection, its command, and the page in Chromium.

The batches behind it are made the real way (tests/batches.py): submitted to the
real Redis and summarized by the real drain loop with the stand-in engine.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from starlette.testclient import TestClient

from core import database
from core.errors import SummarizeError
from core.settings import Settings
from core.tables import results
from readers.dashboard.app import LOOPBACK_NAMES, create_app
from readers.dashboard.queries import open_readonly
from readers.views import batch_stats
from summarize.cli import main
from tests.batches import durations, submit, summarize_queued
from tests.helpers import write
from tests.stack import dashboard

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def client(settings, week):
    """The app over a read-only connection, as `summarize dashboard` builds it."""
    db = open_readonly(settings)
    with TestClient(create_app(db)) as client:
        yield client
    db.dispose()


# -- the JSON endpoints -----------------------------------------------------------------------


def test_the_overview_shows_the_latest_batches_as_the_views_count_them(client, week):
    data = client.get("/api/overview").json()

    assert [b["batch"] for b in data["batches"]] == ["tuesday", "monday"]
    tuesday = data["batches"][0]
    assert {
        k: tuesday[k]
        for k in ("documents", "succeeded", "failed", "deduplicated", "queued", "running")
    } == {
        "documents": 16,
        "succeeded": 14,
        "failed": 2,
        "deduplicated": 1,
        "queued": 0,
        "running": 0,
    }
    with week.connect() as conn:
        view = conn.execute(sa.select(batch_stats).where(batch_stats.c.batch == "tuesday")).one()
    assert tuesday["documents_per_s"] == view.documents_per_s
    assert tuesday["p95_document_s"] == view.p95_document_s
    assert tuesday["first_started_at"].endswith("+00:00")
    assert data["active"] is False
    assert data["failures"] == 2
    assert sum(day["documents"] for day in data["days"]) == 21
    assert sum(day["completion_tokens"] for day in data["days"]) == sum(
        b["completion_tokens"] for b in data["batches"]
    )


def test_the_overview_is_active_while_a_batch_has_documents_queued(
    client, settings, week, tmp_path
):
    submit(settings, week, tmp_path, "wednesday", {"w.txt": "wednesday words"})

    data = client.get("/api/overview?latest=1").json()

    assert [(b["batch"], b["queued"]) for b in data["batches"]] == [("wednesday", 1)]
    assert data["active"] is True


def test_a_batch_opens_on_its_slowest_documents_with_summaries_and_its_failures(
    client, settings, week, tmp_path
):
    detail = client.get("/api/batches/tuesday").json()

    assert detail["batch"]["batch"] == "tuesday"
    assert detail["settings"] == {
        "instruction": settings.instruction,
        "max_tokens": settings.summary_max_tokens,
        "max_sentences": 3,
    }
    assert detail["metadata"] == {}
    slowest = detail["slowest"]
    assert [d["seconds"] for d in slowest] == pytest.approx(durations(week, "tuesday")[:10])
    assert all(re.fullmatch(r"summary of \d+ tokens", d["summary"]) for d in slowest)
    assert {d["finish_reason"] for d in slowest} == {"stop"}
    folder = tmp_path / "tuesday" / "corpus"
    failed = {f["source_path"]: f for f in detail["failed"]}
    assert sorted(failed) == [str(folder / "broken.txt"), str(folder / "poison.txt")]
    assert failed[str(folder / "poison.txt")]["attempts"] == 3
    assert failed[str(folder / "poison.txt")]["error"] == (
        "ValueError: the engine refused this prompt (after 3 attempts)"
    )


def test_a_batch_shows_its_own_instruction_length_and_metadata(client, env, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha.")
    CliRunner().invoke(
        main,
        ["submit", str(tmp_path / "in"), "--batch", "tagged", "--prompt", "Bullets, please.",
         "--max-tokens", "64", "--meta", "team=ops", "--meta", "night=3"],
        env=env,
        catch_exceptions=False,
    )  # fmt: skip

    detail = client.get("/api/batches/tagged").json()

    assert detail["settings"] == {
        "instruction": "Bullets, please.",
        "max_tokens": 64,
        "max_sentences": None,
    }
    assert detail["metadata"] == {"night": "3", "team": "ops"}


def test_a_batch_lists_its_flagged_summaries_newest_first_with_its_quality(
    client, settings, week, tmp_path
):
    submit(settings, week, tmp_path, "wednesday", {"stuck.txt": "stuck", "w.txt": "wednesday"})
    summarize_queued(settings, week, "wednesday")

    detail = client.get("/api/batches/wednesday").json()
    overview = client.get("/api/overview").json()

    with week.connect() as conn:
        rows = conn.execute(
            sa.select(results).where(results.c.batch == "wednesday").order_by(results.c.id)
        ).all()
    stuck, plain = rows
    assert stuck.looped and not plain.looped and plain.novel_numbers == 1  # `summary of N tokens`
    listed = {d["source_path"]: d for d in detail["flagged"]}
    assert {path: d["looped"] for path, d in listed.items()} == {
        stuck.source_path: True,
        plain.source_path: False,
    }
    assert listed[stuck.source_path]["summary"] == stuck.summary
    times = [d["finished_at"] for d in detail["flagged"]]
    assert times == sorted(times, reverse=True)  # newest first
    assert {k: detail["batch"][f"quality_{k}"] for k in ("summaries", "looped", "truncated")} == {
        "summaries": 2,
        "looped": 1,
        "truncated": 0,
    }
    (listed,) = [b for b in overview["batches"] if b["batch"] == "wednesday"]
    assert (listed["quality_looped"], listed["quality_novel_numbers"]) == (1, 1)


def test_an_unknown_batch_is_a_404_that_says_so(client):
    response = client.get("/api/batches/no%20such")

    assert response.status_code == 404
    assert response.json() == {"error": "No batch named 'no such'."}


def test_the_page_loads_its_scripts_from_the_package_not_a_cdn(client):
    page = client.get("/")
    chart = client.get("/static/chart.umd.min.js")

    assert page.status_code == 200
    assert "default-src 'self'" in page.headers["content-security-policy"]
    scripts = re.findall(r'<script src="([^"]+)"', page.text)
    assert scripts == ["static/chart.umd.min.js", "static/app.js"]
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
    assert chart.status_code == 200
    assert chart.text.startswith("/*!\n * Chart.js v4.")
    assert "Released under the MIT License" in chart.text[:300]


def test_on_loopback_a_request_naming_another_host_is_refused(settings, week):
    """A web page elsewhere cannot reach the dashboard through DNS rebinding."""
    db = open_readonly(settings)
    app = create_app(db, allowed_hosts=LOOPBACK_NAMES)

    assert TestClient(app, base_url="http://evil.example").get("/api/overview").status_code == 400
    for url in ("http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"):
        assert TestClient(app, base_url=url).get("/api/overview").status_code == 200, url
    db.dispose()


# -- read-only --------------------------------------------------------------------------------


def test_the_dashboards_connection_refuses_to_write(settings, week):
    db = open_readonly(settings)

    with pytest.raises(sa.exc.DBAPIError, match="(?i)read-?only"), db.begin() as conn:
        conn.execute(results.delete())

    db.dispose()
    with week.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(results)).scalar() == 21


def test_a_database_path_with_a_question_mark_is_still_opened_read_only(tmp_path):
    settings = Settings.from_env({"SUMMARIZE_DATA_DIR": str(tmp_path / "odd?mode=rwc#x")})
    database.ready(settings).dispose()

    db = open_readonly(settings)
    with pytest.raises(sa.exc.DBAPIError, match="(?i)read-?only"), db.begin() as conn:
        conn.execute(results.delete())
    db.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd?mode=rwc#x"]  # nothing else made


def test_the_dashboard_does_not_create_a_database_that_is_not_there(env, settings):
    result = CliRunner().invoke(main, ["dashboard", "--port", "0"], env=env)

    assert result.exit_code == 1
    if settings.database_url.startswith("sqlite"):
        assert result.output == (
            f"Error: There is no database to show at {settings.database_url}: submit a batch "
            "first (`summarize submit PATH`), or point SUMMARIZE_DATABASE_URL at the database "
            "the workers write to.\n"
        )
        assert not os.path.exists(settings.database_url.removeprefix("sqlite:///"))
    else:  # PostgreSQL: the database is there, but empty
        assert result.output == (
            f"Error: The database at {settings.database_url} has no batch_quality, batch_stats, "
            "daily_stats, failures, flagged views yet: run `summarize db upgrade` once, then "
            "start the dashboard again.\n"
        )
        db = sa.create_engine(settings.database_url)
        assert sa.inspect(db).get_table_names() == []
        db.dispose()


def test_open_readonly_refuses_a_database_without_the_views(settings):
    db = database.connect(settings)
    with db.begin() as conn:  # a database some other tool made: no views in it
        conn.execute(sa.text("CREATE TABLE unrelated (id INTEGER)"))
    db.dispose()

    with pytest.raises(SummarizeError, match="run `summarize db upgrade` once"):
        open_readonly(settings)


# -- the command ------------------------------------------------------------------------------


def test_a_port_in_use_is_an_error_that_says_what_to_do(env, db):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = CliRunner().invoke(main, ["dashboard", "--port", str(port)], env=env)

    assert result.exit_code == 1
    assert result.output == (
        f"Error: Port {port} on 127.0.0.1 is in use: stop what listens there, or choose "
        "another port with --port (--port 0 picks a free one).\n"
    )


@pytest.fixture
def server(env, week):
    """`summarize dashboard --port 0` in its own process; yields its URL."""
    with dashboard(env) as (url, _):
        assert url.startswith("http://127.0.0.1:")
        yield url


# -- the page in a real browser ---------------------------------------------------------------


def canvas_is_drawn(page, canvas_id: str) -> bool:
    return page.evaluate(
        """(id) => {
            const canvas = document.getElementById(id);
            const pixels = canvas.getContext("2d")
                .getImageData(0, 0, canvas.width, canvas.height).data;
            for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) return true;
            return false;
        }""",
        canvas_id,
    )


def sorted_stats(db) -> list[sa.Row]:
    """batch_stats rows oldest first, as the charts show them."""
    query = sa.select(batch_stats).order_by(batch_stats.c.created_at, batch_stats.c.batch)
    with db.connect() as conn:
        return conn.execute(query).all()


@pytest.mark.timeout(300)
@pytest.mark.browser
def test_the_page_shows_the_batches_charts_and_a_batchs_documents_in_chromium(
    server, settings, week, tmp_path
):
    from playwright.sync_api import expect, sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    submit(settings, week, tmp_path, "wednesday", {"w.txt": "one", "x.txt": "two"})  # queued
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        problems = []

        def watched_page():
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("requestfailed", lambda r: problems.append(f"{r.url} failed"))
            page.on(
                "response",
                lambda r: problems.append(f"{r.url} {r.status}") if r.status >= 400 else None,
            )
            return page

        page = watched_page()
        try:
            page.goto(server)

            tuesday = page.locator('#batches tr[data-batch="tuesday"]')
            expect(tuesday).to_be_visible(timeout=30_000)
            # documents, succeeded, failed, pending
            assert tuesday.locator("td").all_inner_texts()[2:6] == ["16", "14", "2", "0"]
            wednesday = page.locator('#batches tr[data-batch="wednesday"] td')
            assert wednesday.all_inner_texts()[2:6] == ["2", "0", "0", "2"]
            charted = page.evaluate(
                """() => ["throughput-chart", "tokens-chart", "failures-chart", "quality-chart"].map(
                    (id) => Chart.getChart(id).data.datasets[0].data)"""
            )
            oldest_first = sorted_stats(week)
            assert [b.batch for b in oldest_first] == ["monday", "tuesday", "wednesday"]
            assert charted[0] == pytest.approx([b.documents_per_s for b in oldest_first])
            assert sum(charted[1]) == sum(b.prompt_tokens for b in oldest_first)
            assert charted[2] == [0, 2, 0]
            assert charted[3] == [0, 0, None]  # no summary loops; wednesday has none yet
            for canvas in ("throughput-chart", "tokens-chart", "failures-chart", "quality-chart"):
                assert canvas_is_drawn(page, canvas), canvas

            page.get_by_role("button", name="tuesday").click()
            expect(page.locator("#detail")).to_be_visible()
            expect(page.locator("#detail-name")).to_have_text("tuesday")
            expect(page.locator("#slowest li")).to_have_count(10)
            first = page.locator("#slowest details").first
            first.locator("summary").click()
            expect(first.locator("p.summary")).to_have_text(re.compile(r"summary of \d+ tokens"))
            expect(page.locator("#failed tbody tr")).to_have_count(2)
            expect(page.locator("#flagged li")).to_have_count(14)  # `summary of N tokens`: N is new
            flagged = page.locator("#flagged details").first
            flagged.locator("summary").click()
            expect(flagged.locator("p.summary")).to_have_text(re.compile(r"summary of \d+ tokens"))
            expect(page.locator("#failed")).to_contain_text("the engine refused this prompt")
            page.screenshot(path=ARTIFACTS / f"dashboard-{week.dialect.name}.png", full_page=True)

            # While wednesday runs the page polls every few seconds: no reload needed.
            summarize_queued(settings, week, "wednesday")
            expect(wednesday.nth(3)).to_have_text("2", timeout=15_000)  # succeeded
            expect(wednesday.nth(5)).to_have_text("0")  # pending
            expect(page.locator("#updated")).to_contain_text("nothing running", timeout=15_000)

            # A malformed address opens no batch, and the page loads all the same.
            # (in a page of its own: a reload would abort the first page's poll in flight)
            other = watched_page()
            other.goto(server + "#batch=%E0%A4%A")
            expect(other.locator('#batches tr[data-batch="tuesday"]')).to_be_visible()
            expect(other.locator("#detail")).to_be_hidden()
        finally:
            browser.close()
    assert problems == []
