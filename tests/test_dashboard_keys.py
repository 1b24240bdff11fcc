"""The dashboard behind keys: once a key that opens it is made, every request needs one.

A browser gives the key at its password prompt (HTTP Basic), a script as a bearer; the
API's other keys do not open it; a revoked key stops at once; off loopback it will not
start without such a key.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from api import keys
from readers.dashboard.app import create_app
from readers.dashboard.gate import given_key
from readers.dashboard.queries import open_readonly
from summarize.cli import main
from tests.stack import dashboard


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer sk-summarize-abc", "sk-summarize-abc"),
        (basic("anyone", "sk-summarize-abc"), "sk-summarize-abc"),
        (basic("sk-summarize-abc", ""), "sk-summarize-abc"),  # pasted as the user name
        ("Basic not-base64!", None),
        ("Basic " + base64.b64encode(b"\xff\xfe").decode(), None),
        ("Digest sk-summarize-abc", None),
        ("Bearer ", None),
        ("Bearer " + "k" * 600, None),
        ("", None),
    ],
)
def test_the_key_is_read_from_a_bearer_or_a_browsers_password(header, key):
    assert given_key(header) == key


@pytest.fixture
def door(settings, week):
    """The dashboard as `summarize dashboard` builds it once a dashboard key exists; the
    keys `ops` (opens it) and `alice` (the API only)."""
    made = {"ops": keys.create(week, "ops", dashboard=True), "alice": keys.create(week, "alice")}
    db = open_readonly(settings)

    def opens(key: str) -> bool:
        return keys.owner(db, key, dashboard=True) is not None

    with TestClient(create_app(db, opens=opens)) as client:
        yield client, made
    db.dispose()


def test_without_a_key_the_browser_is_asked_for_one(door):
    client, _ = door

    for path in ("/", "/api/overview", "/api/batches/monday", "/static/app.js"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"].startswith('Basic realm="summarize')
        assert "keys create NAME --dashboard" in refused.json()["error"]


def test_a_dashboard_key_opens_every_page_as_a_password_or_a_bearer(door):
    client, made = door

    for header in (basic("ops", made["ops"]), f"Bearer {made['ops']}"):
        for path in ("/", "/api/overview", "/static/app.js"):
            assert client.get(path, headers={"Authorization": header}).status_code == 200, path
    overview = client.get("/api/overview", headers={"Authorization": f"Bearer {made['ops']}"})
    assert overview.json()["batches"]


def test_a_key_of_the_api_alone_or_a_revoked_one_does_not_open_it(door, week):
    client, made = door

    assert client.get("/", headers={"Authorization": basic("x", made["alice"])}).status_code == 401
    keys.revoke(week, "ops")
    assert client.get("/", headers={"Authorization": basic("x", made["ops"])}).status_code == 401


def test_off_loopback_it_will_not_start_without_a_dashboard_key(env, week):
    keys.create(week, "alice")  # opens the API, not the dashboard

    result = CliRunner().invoke(main, ["dashboard", "--host", "0.0.0.0", "--port", "0"], env=env)

    assert result.exit_code == 1
    assert result.output == (
        "Error: Refusing to listen on 0.0.0.0 with no dashboard key: anyone who reaches it "
        "could read every summary. Make one first (summarize keys create NAME --dashboard).\n"
    )


def test_the_dashboard_process_off_loopback_asks_for_the_key_it_was_given(env, week):
    made = CliRunner().invoke(main, ["keys", "create", "ops", "--dashboard"], env=env)
    assert made.exit_code == 0, made.output
    key = made.stdout.strip()
    listed = CliRunner().invoke(main, ["keys", "list"], env=env)
    assert re.search(r"^ops +made .* live  opens the dashboard$", listed.output, re.M)

    with dashboard(env, "--host", "0.0.0.0") as (printed, errors):
        url = printed.replace("0.0.0.0", "127.0.0.1") + "api/overview"

        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        asked = urllib.request.Request(url, headers={"Authorization": basic("ops", key)})
        with urllib.request.urlopen(asked, timeout=10) as answer:
            assert answer.status == 200
    assert key not in errors[0]  # keys are never logged


@pytest.mark.timeout(300)
@pytest.mark.browser
def test_in_chromium_the_password_prompt_takes_the_key_and_the_page_polls_with_it(env, week):
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    from tests.test_dashboard import CHROMIUM, CHROMIUM_ARGS

    key = keys.create(week, "ops", dashboard=True)
    with dashboard(env) as (url, _), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            # No key: headless, Chromium cannot show the prompt and gives the page up.
            with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
                browser.new_page().goto(url)
            stranger = browser.new_context(http_credentials={"username": "ops", "password": "no"})
            assert stranger.new_page().goto(url).status == 401

            # What a person types at the prompt: any user name, the key as the password.
            context = browser.new_context(http_credentials={"username": "ops", "password": key})
            page = context.new_page()
            statuses = []
            page.on("response", lambda r: statuses.append((r.url, r.status)))
            page.goto(url)
            expect(page.locator('#batches tr[data-batch="tuesday"]')).to_be_visible(timeout=30_000)
            fetched = [status for address, status in statuses if "/api/overview" in address]
            assert fetched and set(fetched) == {200}
        finally:
            browser.close()
