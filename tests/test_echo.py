"""`SUMMARIZE_MODEL=echo`: the instant engine, for smoke tests without a GPU and for measuring
the pipeline's own cost. It answers each document with its first sentence and counts words as
tokens; the real `summarize worker` runs it like any engine."""

from __future__ import annotations

import sqlalchemy as sa

from core.prompt import SummarySpec
from core.tables import results
from tests.helpers import write
from tests.stack import Worker, cli
from worker.echo import EchoEngine


def finish(engine: EchoEngine, text: str, max_tokens: int = 50):
    engine.add("r1", engine.prompt_ids("Summarize this.", text), SummarySpec("", max_tokens))
    (finished,) = engine.step()
    return finished


def test_the_summary_is_the_first_sentence_with_words_as_tokens():
    engine = EchoEngine(max_model_len=2048)

    done = finish(engine, "The bridge reopens on Monday. Repairs took a year!  More later.")

    assert done.text == "The bridge reopens on Monday."
    assert (done.prompt_tokens, done.completion_tokens) == (2 + 1 + 11, 5)
    assert done.finish_reason == "stop"
    assert engine.unfinished() == 0


def test_a_first_sentence_longer_than_the_summary_is_cut_at_the_length():
    done = finish(EchoEngine(max_model_len=2048), "one two three four five six.", max_tokens=4)

    assert (done.text, done.completion_tokens, done.finish_reason) == (
        "one two three four",
        4,
        "length",
    )


def test_a_prompt_longer_than_the_context_is_refused_like_vllm_refuses_it():
    engine = EchoEngine(max_model_len=64)
    try:
        engine.add("r1", engine.prompt_ids("Summarize.", "word " * 60), SummarySpec("", 16))
    except ValueError as exc:
        assert "do not fit in the 64-token context" in str(exc)
    else:
        raise AssertionError("the prompt was accepted")


def test_submit_and_a_real_worker_with_the_echo_model_write_rows_without_loading_a_model(
    tmp_path, redis_url, queue_name
):
    folder = tmp_path / "corpus"
    write(folder, "a.txt", "Alpha is first. Then beta.")
    write(folder, "b.md", "Gamma rays are bright! Delta follows.")
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": "echo",
    }
    assert cli(env, "submit", str(folder), "--batch", "smoke").returncode == 0

    with Worker(env, tmp_path / "worker.log", "--burst") as worker:
        assert worker.wait(120) == 0, worker.tail()

    db = sa.create_engine(f"sqlite:///{tmp_path / 'data' / 'summarize.db'}")
    with db.connect() as conn:
        found = {
            r.source_path.rsplit("/", 1)[-1]: r
            for r in conn.execute(sa.select(results).where(results.c.batch == "smoke"))
        }
    db.dispose()
    assert {name: (r.status, r.model, r.summary) for name, r in found.items()} == {
        "a.txt": ("succeeded", "echo", "Alpha is first."),
        "b.md": ("succeeded", "echo", "Gamma rays are bright!"),
    }
    assert found["a.txt"].completion_tokens == 3
    assert "vllm" not in worker.log_path.read_text().lower()


def test_its_vocabulary_is_forgotten_between_steps_so_memory_stays_flat(monkeypatch):
    monkeypatch.setattr("worker.echo.VOCABULARY_WORDS", 50)
    engine = EchoEngine(max_model_len=2048)

    for i in range(20):
        done = finish(engine, " ".join(f"w{i}x{j}" for j in range(10)) + ". tail")

    assert done.text == " ".join(f"w19x{j}" for j in range(10)) + "."
    assert len(engine._words) <= 50 + 12
