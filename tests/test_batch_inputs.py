"""What a batch is made of beyond text files: records with ids and metadata, OpenAI Batch
requests with their own instructions, and a batch's own prompt, length and metadata."""

from __future__ import annotations

import json

import redis
import sqlalchemy as sa

from core.tables import batches, prompts, results
from jobs.submit import count_documents
from jobs.submit import submit as submit_files
from tests.fakes import FakeEngine
from tests.helpers import (
    WAIT_S,
    openai_request,
    queued_keys,
    rows_by_name,
    run,
    summarize_one,
    summary_line,
    write,
)


def summarize_every_row(db, drain) -> list:
    """Hand the drain every document the table holds; each one's outcome, once settled."""
    with db.connect() as conn:
        keys = set(conn.execute(sa.select(results.c.result_key)).scalars())
    return [summarize_one(drain, key).result(WAIT_S) for key in keys]


def test_each_record_of_a_jsonl_or_csv_file_is_a_row_with_its_id_and_metadata(env, db, tmp_path):
    folder = tmp_path / "exports"
    write(
        folder,
        "news.jsonl",
        '{"id": "n1", "text": "Floods close the coast road.", "desk": "local"}\n'
        "{broken\n"
        '{"id": "n3", "text": "The mayor resigns."}\n',
    )
    write(folder, "tickets.csv", "ticket,body,team\nT-1,Printer on fire.,ops\nT-2,,ops\n")
    write(folder, "notes.txt", "A plain file.")

    result = run(env, "submit", str(folder), "--batch", "exports")  # CSV without a `text` column
    again = run(
        env, "submit", str(folder / "tickets.csv"), "--batch", "tickets",
        "--text-field", "body", "--id-field", "ticket",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert summary_line(result.output, "documents found") == 5  # 3 + 1 (the CSV, refused) + 1
    assert summary_line(result.output, "failed to read") == 2
    found = rows_by_name(db)
    shown = {
        path: (r.batch, r.status, r.doc_id, r.metadata, r.error)
        for path, r in found.items()
        if r.batch == "exports"
    }
    assert shown == {
        "news.jsonl:1": ("exports", "queued", "n1", '{"desk":"local"}', None),
        "news.jsonl:2": ("exports", "failed", str(folder / "news.jsonl:2"), None,
                         "line 2: not JSON (Expecting property name enclosed in double quotes, column 2)"),
        "news.jsonl:3": ("exports", "queued", "n3", None, None),
        "tickets.csv": ("exports", "failed", str(folder / "tickets.csv"), None,
                        "no column 'text' (columns: 'ticket', 'body', 'team'): name the column "
                        "that holds the text with --text-field (FILE=NAME for this file alone)"),
        "notes.txt": ("exports", "queued", str(folder / "notes.txt"), None, None),
    }  # fmt: skip
    assert again.exit_code == 0, again.output
    tickets = {
        p: (r.status, r.doc_id, r.metadata, r.error)
        for p, r in found.items()
        if r.batch == "tickets"
    }
    assert tickets == {
        "tickets.csv:2": ("queued", "T-1", '{"team":"ops"}', None),
        "tickets.csv:3": ("failed", "T-2", None, "line 3: empty text: nothing to summarize"),
    }  # fmt: skip

    # Submitting the same files again adds nothing: a record's row is found by FILE:LINE.
    repeat = run(env, "submit", str(folder), "--batch", "exports")
    assert summary_line(repeat.output, "already in batch") == 5
    assert len(queued_keys(env)) == 4


def test_a_batchs_own_prompt_length_and_metadata_are_kept_and_shown(env, db, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha beta gamma.")
    prompt_file = write(tmp_path, "bullets.txt", "  List the key points as bullets.\n")

    result = run(
        env, "submit", str(tmp_path / "in"), "--batch", "bullets", "--prompt-file",
        str(prompt_file), "--max-tokens", "200", "--meta", "team=research", "--meta", "run=7",
    )  # fmt: skip
    limited = run(
        env, "submit", str(tmp_path / "in"), "--batch", "limited", "--prompt", "Two lines.",
        "--max-sentences", "2",
    )  # fmt: skip
    plain = run(env, "submit", str(tmp_path / "in"), "--batch", "plain")

    assert [r.exit_code for r in (result, limited, plain)] == [0, 0, 0], result.output
    with db.connect() as conn:
        made = {
            b.name: (b.instruction, b.max_tokens, b.max_sentences, b.metadata)
            for b in conn.execute(sa.select(batches))
        }
        known = {p.prompt_hash: p.instruction for p in conn.execute(sa.select(prompts))}
        hashes = {b.name: b.prompt_hash for b in conn.execute(sa.select(batches))}
    assert made["bullets"] == (
        "List the key points as bullets.",
        200,
        None,
        '{"run":"7","team":"research"}',
    )  # fmt: skip: an instruction of your own has no sentence limit unless asked
    assert made["limited"] == ("Two lines.", 128, 2, None)
    assert made["plain"][1:3] == (128, 3)  # the default instruction's three sentences
    assert {known[h] for h in hashes.values()} == {i for i, *_ in made.values()}
    assert len(set(hashes.values())) == 3  # three prompts: one document queued three times
    assert len(queued_keys(env)) == 3

    listed = run(env, "batches")
    assert "run=7 team=research" in listed.output
    (status,) = json.loads(run(env, "status", "bullets", "--json").output)
    assert status["metadata"] == {"run": "7", "team": "research"}
    assert status["settings"] == {
        "instruction": "List the key points as bullets.",
        "max_tokens": 200,
        "max_sentences": None,
        "prompt_hash": hashes["bullets"],
        "expires_at": None,
    }
    assert status["request_counts"] == {
        "total": 1,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "expired": 0,
    }
    assert status["completed_at"] is None

    other = run(env, "submit", str(tmp_path / "in"), "--batch", "bullets", "--prompt-file",
                str(prompt_file), "--max-tokens", "200", "--meta", "team=ops")  # fmt: skip
    assert other.exit_code == 1
    assert other.output.endswith(
        "Error: Batch 'bullets' was submitted with other --meta "
        '({"run":"7","team":"research"}): repeat the same --meta, leave it out, or choose '
        "another --batch name.\n"
    )


def test_bad_batch_settings_are_refused_with_the_fix(env, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha.")

    both = run(env, "submit", str(tmp_path / "in"), "--prompt", "x", "--prompt-file", "y")
    meta = run(env, "submit", str(tmp_path / "in"), "--meta", "novalue")
    missing = run(env, "submit", str(tmp_path / "in"), "--prompt-file", str(tmp_path / "nope"))
    huge = run(env, "submit", str(tmp_path / "in"), "--max-tokens", "5000")

    assert "--prompt and --prompt-file both given: use one of them." in both.output
    assert "Invalid value for --meta: 'novalue' is not KEY=VALUE" in meta.output
    assert (
        f"Error: --prompt-file='{tmp_path / 'nope'}' cannot be read (No such file or directory)"
        in missing.output
    )
    assert huge.exit_code == 1
    assert huge.output == (
        "Error: Profile 'throughput' cannot run: a summary of 5000 tokens leaves no room for the "
        "document in a 2048-token context: lower --max-tokens or raise SUMMARIZE_MAX_MODEL_LEN.\n"
    )


def test_two_batches_in_flight_each_get_their_own_instruction_and_length(
    settings,
    db,
    tmp_path,
    run_drain,  # noqa: F811 - the fixture
):
    folder = tmp_path / "corpus"
    write(folder, "a.txt", "apples grow on trees")
    write(folder, "requests.jsonl", openai_request("q1", "pears are sweet", "Reply tersely please", max_tokens=9)
          + openai_request("q2", "plums are purple"))  # fmt: skip
    client = redis.Redis.from_url(settings.broker_url)
    short = settings.with_changes(instruction="Say it shortly", max_tokens=5)
    long = settings.with_changes(instruction="Explain it at length", max_tokens=50)
    submit_files(short, db, client, [str(folder / "a.txt")], "short")
    submit_files(long, db, client, [str(folder)], "long")
    engine = FakeEngine()
    drain = run_drain(engine)

    summarize_every_row(db, drain)

    assert sorted(engine.asked) == [
        ("Explain it at length apples grow on trees", 50),
        ("Explain it at length plums are purple", 50),  # no system message: the batch's
        ("Reply tersely please pears are sweet", 9),  # the request's own instruction and length
        ("Say it shortly apples grow on trees", 5),
    ]
    with db.connect() as conn:
        assert set(conn.execute(sa.select(results.c.status)).scalars()) == {"succeeded"}


def test_an_openai_batch_file_comes_back_as_openai_batch_output_and_error_files(
    tmp_path, redis_url, queue_name
):
    """Field by field against vLLM's own models of the OpenAI Batch output line (`vllm
    run-batch` writes them) and of a chat completion, and against the keys OpenAI documents:
    a request that failed is its HTTP response, an `error` object in the body."""
    from vllm.entrypoints.launchers.run_batch import BatchRequestOutput
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse

    from tests.stack import Worker, cli, embedded_env

    requests = write(
        tmp_path,
        "requests.jsonl",
        openai_request("doc-1", "The dam holds more water. Rain is due.", "Be brief.", max_tokens=30)
        + openai_request("doc-2", [{"type": "text", "text": "Wolves return to the valley. Farmers worry."}])
        + json.dumps({"custom_id": "doc-3", "method": "POST", "url": "/v1/embeddings", "body": {}})
        + "\n",
    )  # fmt: skip
    env = embedded_env(tmp_path, redis_url, queue_name, "echo")
    assert cli(env, "submit", str(requests), "--batch", "from-openai").returncode == 0
    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(120) == 0, worker.tail()

    out = cli(env, "results", "--batch", "from-openai", "--format", "openai")
    errors = cli(env, "results", "--batch", "from-openai", "--format", "openai", "--errors-only")

    lines = [json.loads(line) for line in out.stdout.splitlines()]
    failed = [json.loads(line) for line in errors.stdout.splitlines()]
    assert [line["custom_id"] for line in lines] == ["doc-1", "doc-2"]
    assert [line["custom_id"] for line in failed] == ["doc-3"]
    for line in lines + failed:
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert set(line["response"]) == {"status_code", "request_id", "body"}
    for line in lines:  # vLLM models a response body only for success: OpenAI's error body below
        BatchRequestOutput.model_validate(line)
        body = line["response"]["body"]
        assert (line["response"]["status_code"], line["error"]) == (200, None)
        assert {"id", "object", "created", "model", "choices", "usage"} <= set(body)
        completion = ChatCompletionResponse.model_validate(body)
        assert completion.object == "chat.completion" and completion.model == "echo"
        assert completion.choices[0].message.role == "assistant"
        usage = completion.usage
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0
    contents = [line["response"]["body"]["choices"][0]["message"]["content"] for line in lines]
    assert contents == ["The dam holds more water.", "Wolves return to the valley."]
    (error,) = failed
    assert error["response"]["status_code"] == 400 and error["error"] is None
    assert error["response"]["body"] == {
        "error": {
            "message": "line 3: url '/v1/embeddings': only /v1/chat/completions requests can be summarized",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }  # fmt: skip
    # The request's system message was its instruction: its prompt counts those words too.
    assert lines[0]["response"]["body"]["usage"]["prompt_tokens"] == 2 + 1 + 8


SCHEMA = {  # bounded as it is: stored as given (jobs/schemas.py)
    "type": "object",
    "properties": {
        "points": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 3}
    },
}


def test_a_schema_batch_asks_for_json_of_it_in_its_final_summaries_only(
    settings,
    db,
    tmp_path,
    run_drain,  # noqa: F811 - the fixture
):
    folder = tmp_path / "corpus"
    write(folder, "short.txt", "tiny words here")
    write(folder, "long.txt", " ".join(f"w{i}" for i in range(900)))
    client = redis.Redis.from_url(settings.broker_url)
    submit_files(settings, db, client, [str(folder)], "json", schema=SCHEMA)
    engine = FakeEngine(max_model_len=400)
    drain = run_drain(engine)

    outcomes = summarize_every_row(db, drain)

    assert {o.status for o in outcomes} == {"succeeded"}
    with db.connect() as conn:
        (prompt,) = conn.execute(sa.select(prompts)).all()

    text = json.dumps(SCHEMA, sort_keys=True)
    assert prompt.schema == text and prompt.max_sentences is None
    assert prompt.instruction == settings.instruction + "\n\nAnswer in JSON."
    schemas = [engine.schemas[r] for r in engine.added]
    long_parts = len(engine.added) - 2  # the short document and the long one's combining pass
    assert schemas.count(text) == 2 and schemas.count(None) == long_parts >= 2


def test_a_schema_that_is_not_one_is_refused_with_an_example(env, tmp_path):
    write(tmp_path / "in", "a.txt", "Alpha.")
    not_json = write(tmp_path, "a.json", "{oops")
    not_schema = write(tmp_path, "b.json", "[1, 2]")

    first = run(env, "submit", str(tmp_path / "in"), "--schema", str(not_json))
    second = run(env, "submit", str(tmp_path / "in"), "--schema", str(not_schema))

    assert first.exit_code == 1 and f"Error: --schema='{not_json}' is not JSON (" in first.output
    assert second.exit_code == 1
    assert (
        f"Error: --schema='{not_schema}' is not a JSON schema (an object with `type`"
        in second.output
    )


def test_summaries_of_a_schema_batch_are_exported_as_json_objects():
    import io

    from readers import export

    row = dict.fromkeys(export.EXPORTED) | {"prompt_hash": "h1", "summary": '{"points": ["a"]}'}
    cut = row | {"summary": '{"points": ["a", "b'}  # cut at the length cap: not JSON
    other = row | {"prompt_hash": "h2"}
    out = io.StringIO()

    export.write(iter([row, cut, other]), out, "jsonl", frozenset({"h1"}))

    summaries = [json.loads(line)["summary"] for line in out.getvalue().splitlines()]
    assert summaries == [{"points": ["a"]}, '{"points": ["a", "b', '{"points": ["a"]}']


def test_documents_still_queued_when_a_batch_expires_end_as_expired(env, settings, db, tmp_path):
    from datetime import timedelta

    from core.requeue import EXPIRED, sweep
    from core.tables import utcnow
    from readers.views import as_utc

    for name in ("a.txt", "b.txt", "c.txt"):
        write(tmp_path / "in", name, f"Document {name}.")
    write(tmp_path / "other", "d.txt", "Another batch's document.")
    result = run(env, "submit", str(tmp_path / "in"), "--batch", "day", "--expire-after", "24h")
    run(env, "submit", str(tmp_path / "other"), "--batch", "forever")
    assert result.exit_code == 0, result.output
    with db.begin() as conn:
        (expires,) = conn.execute(
            sa.select(batches.c.expires_at).where(batches.c.name == "day")
        ).one()
        conn.execute(  # one document is running; then the day passes
            results.update().where(results.c.source_path.like("%b.txt")).values(status="running")
        )
        conn.execute(
            batches.update()
            .where(batches.c.name == "day")
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    client = redis.Redis.from_url(settings.broker_url)

    sweep(db, client, settings, older_than_s=3600)

    found = {p: (r.status, r.error) for p, r in rows_by_name(db).items()}
    assert found == {
        "a.txt": ("expired", EXPIRED),
        "b.txt": ("running", None),  # running documents finish
        "c.txt": ("expired", EXPIRED),
        "d.txt": ("queued", None),
    }
    assert abs((as_utc(expires) - utcnow()).total_seconds() - 86400) < 120
    errors = [
        json.loads(line)
        for line in run(
            env, "results", "--batch", "day", "--format", "openai", "--errors-only"
        ).output.splitlines()
    ]
    assert [(e["response"], e["error"]["code"]) for e in errors] == [(None, "batch_expired")] * 2
    (status,) = json.loads(run(env, "status", "day", "--json").output)
    assert status["request_counts"] == {
        "total": 3,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "expired": 2,
    }
    bad = run(env, "submit", str(tmp_path / "in"), "--expire-after", "soon")
    assert (
        "Invalid value for --expire-after: 'soon' is not a duration: write 90s, 45m, 24h or 7d"
        in bad.output
    )


def test_the_progress_bar_counts_records_not_files_and_ends_at_the_documents_read(
    settings, db, tmp_path
):
    folder = tmp_path / "in"
    write(folder, "notes.txt", "A plain file.")
    news = "".join(json.dumps({"id": i, "text": f"Story {i}."}) + "\n" for i in range(250))
    write(folder, "news.jsonl", news + "\n")  # a blank line: counted, not read
    write(folder, "tickets.csv", "id,text\n" + "".join(f"{i},Ticket {i}.\n" for i in range(40)))
    client = redis.Redis.from_url(settings.broker_url)
    ticks = []

    estimate = count_documents([str(folder)])
    report = submit_files(
        settings, db, client, [str(folder)], "night", on_document=lambda: ticks.append(1)
    )

    assert estimate == 1 + 251 + 40
    assert len(ticks) == report.documents == 1 + 250 + 40
