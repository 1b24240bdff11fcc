"""The drain loop, with a stand-in engine and a real database: admission, bulk writes, failures."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from datetime import timedelta

import pytest
import redis

from core import messages
from core.requeue import requeue_stranded
from core.settings import Settings
from core.tables import results, utcnow
from tests.batches import submitted
from tests.fakes import LOOP, FakeEngine
from tests.helpers import WAIT_S, CountingRecorder, rows_by_name, summarize_one
from worker import runtime
from worker.drain import Drain, retry_delay_s
from worker.recorder import Recorder
from worker.tickets import Signal


def test_each_document_is_written_with_the_engines_token_counts(settings, db, tmp_path, run_drain):
    keys = submitted(settings, db, tmp_path, {"a.txt": "one two three", "b.txt": "four five"})
    engine = FakeEngine()
    drain = run_drain(engine)

    outcomes = [summarize_one(drain, key).result(WAIT_S) for key in keys.values()]

    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    found = rows_by_name(db)
    instruction_tokens = len(settings.instruction.split())
    assert found["a.txt"].prompt_tokens == instruction_tokens + 3 + 3
    assert found["b.txt"].prompt_tokens == instruction_tokens + 2 + 3
    assert found["a.txt"].summary == f"summary of {instruction_tokens + 6} tokens"
    assert found["a.txt"].completion_tokens == 4
    assert found["a.txt"].finish_reason == "stop"
    assert found["a.txt"].parts == 1
    assert found["a.txt"].attempts == 1
    assert found["a.txt"].status == "succeeded"
    assert found["a.txt"].started_at is not None and found["a.txt"].finished_at is not None


def test_the_documents_started_together_are_tokenized_in_one_call(
    settings, db, tmp_path, run_drain
):
    texts = {f"{i}.txt": f"report {i} of the council" for i in range(6)}
    keys = submitted(settings, db, tmp_path, texts)
    engine = FakeEngine()
    drain = run_drain(engine)

    settled = drain.summarize_all(list(keys.values())).result(WAIT_S)

    assert len(settled) == 6
    assert [sorted(texts.values())] == [sorted(read) for read in engine.read_together if read]


def test_a_wave_is_written_in_one_transaction_before_its_documents_are_released(
    settings, db, tmp_path, run_drain
):
    keys = submitted(settings, db, tmp_path, {f"{i}.txt": f"text {i}" for i in range(20)})
    drain = run_drain(FakeEngine())

    futures = [summarize_one(drain, key) for key in keys.values()]
    for future in futures:
        assert future.result(WAIT_S).status == "succeeded"

    assert sum(drain.recorder.transactions) == 20
    assert len(drain.recorder.transactions) <= 2  # a burst of messages is one wave, not 20 writes


def test_documents_arriving_while_the_engine_runs_join_the_running_batch(
    settings, db, tmp_path, run_drain
):
    keys = list(
        submitted(settings, db, tmp_path, {f"{i}.txt": f"t {i}" for i in range(12)}).values()
    )
    gate = threading.Semaphore(0)
    engine = FakeEngine(per_step=1, gate=gate)  # one sequence finishes per step, when we say
    drain = run_drain(engine)

    first = [summarize_one(drain, key) for key in keys[:6]]
    wait_until(lambda: engine.unfinished() == 6)  # the first wave runs
    later = [summarize_one(drain, key) for key in keys[6:]]
    gate.release()  # one step: one sequence of the first wave finishes
    wait_until(lambda: engine.unfinished() == 11)  # the second wave joined before the first drained
    for _ in range(11):
        gate.release()

    for future in first + later:
        assert future.result(WAIT_S).status == "succeeded"
    assert engine.peak_unfinished == 11
    assert engine.steps == 12


@contextlib.contextmanager
def paced(settings: Settings, db):
    """A started drain whose engine finishes one request a step, and steps once a release
    of the gate: the test sets the pace."""
    gate = threading.Semaphore(0)
    engine = FakeEngine(per_step=1, gate=gate)
    drain = Drain(engine, CountingRecorder(db), settings, on_fatal=lambda d: None)
    drain.start()
    try:
        yield drain, engine, gate
    finally:
        drain.stop(timeout=5)


def test_the_engine_holds_its_batch_and_half_a_wave_and_the_rest_wait_unclaimed(env, db, tmp_path):
    settings = Settings.from_env(env | {"SUMMARIZE_MAX_NUM_SEQS": "4"})  # room for 4 + 2
    keys = list(
        submitted(settings, db, tmp_path, {f"{i:02}.txt": f"t {i}" for i in range(12)}).values()
    )
    with paced(settings, db) as (drain, engine, gate):
        futures = [summarize_one(drain, key) for key in keys]
        wait_until(lambda: engine.unfinished() == 6)
        time.sleep(0.05)  # were the others admitted, it would be now
        assert engine.unfinished() == 6
        running = {name for name, row in rows_by_name(db).items() if row.status == "running"}
        assert running == {f"{i:02}.txt" for i in range(6)}  # the oldest; the others not claimed
        gate.release()  # one finishes: there is room for one more, and a wave is one here
        wait_until(lambda: len(engine.added) == 7)
        for _ in range(11):
            gate.release()
        assert {f.result(WAIT_S).status for f in futures} == {"succeeded"}
    assert engine.peak_unfinished == 6


def test_an_urgent_batchs_documents_start_before_the_others_held(env, db, tmp_path):
    settings = Settings.from_env(env | {"SUMMARIZE_MAX_NUM_SEQS": "4"})  # room for 4 + 2
    backlog = {f"{i:02}.txt": f"t {i}" for i in range(10)}
    keys = submitted(settings, db, tmp_path, backlog | {"urgent.txt": "now please"})
    urgent = keys.pop("urgent.txt")
    with paced(settings, db) as (drain, engine, gate):
        held = drain.summarize_all(list(keys.values()))  # a normal batch's message
        wait_until(lambda: engine.unfinished() == 6)  # the rest of it waits in hand
        first = drain.summarize_all(
            [urgent], urgency=messages.urgency("summarize.high", "summarize")
        )
        time.sleep(0.05)
        gate.release()  # one finishes: there is room for one more
        wait_until(lambda: len(engine.added) == 7)
        assert rows_by_name(db)["urgent.txt"].status == "running"
        for _ in range(10):
            gate.release()
        assert first.result(WAIT_S)[0].status == "succeeded"
        assert {o.status for o in held.result(WAIT_S)} == {"succeeded"}


def test_a_second_try_goes_before_the_documents_waiting_in_the_engine(env, db, tmp_path):
    """A message is acknowledged once its slowest document is written: a second try queued
    behind the others would hold it, and a share of what the worker may hold, that long more."""
    settings = Settings.from_env(env | {"SUMMARIZE_MAX_NUM_SEQS": "4"})  # room for 4 + 2
    texts = {"00.txt": "a loopy text", **{f"{i:02}.txt": f"t {i}" for i in range(1, 6)}}
    keys = list(submitted(settings, db, tmp_path, texts).values())
    with paced(settings, db) as (drain, engine, gate):
        futures = [summarize_one(drain, key) for key in keys]
        wait_until(lambda: len(engine.added) == 6)
        gate.release()  # the loopy document's first try finishes, looping
        wait_until(lambda: len(engine.added) == 7)
        for _ in range(6):
            gate.release()
        assert {f.result(WAIT_S).status for f in futures} == {"succeeded"}
    first, *others, second = engine.added
    assert engine.finished == [first, second, *others]
    assert rows_by_name(db)["00.txt"].looped is False


def test_a_running_row_is_claimed_again_only_once_its_lease_has_run_out(settings, db, tmp_path):
    (key,) = submitted(settings, db, tmp_path, {"a.txt": "alpha beta"}).values()
    first, second = (Recorder(db, lease_s=60, worker=name) for name in ("first", "second"))

    assert set(first.claim([key])) == {key}
    assert second.claim([key]) == {}  # a second delivery while the first worker runs it
    client = redis.Redis.from_url(settings.broker_url)
    client.delete(settings.queue)  # its message is gone too: a sweep at the wrong moment
    assert requeue_stranded(db, client, settings, older_than_s=0).documents == 0
    second.release([key], claimed=False)  # nor can it hand back what the first one holds
    row = rows_by_name(db)["a.txt"]
    assert (row.status, row.attempts, row.claimed_by) == ("running", 1, "first")
    leased = row.lease_until
    first.renew([key])
    assert rows_by_name(db)["a.txt"].lease_until > leased

    with db.begin() as conn:  # the first worker stalls: its lease runs out
        conn.execute(results.update().values(lease_until=utcnow() - timedelta(seconds=1)))
    assert set(second.claim([key])) == {key}
    row = rows_by_name(db)["a.txt"]
    assert (row.status, row.attempts, row.claimed_by) == ("running", 2, "second")


class HeldRecorder(CountingRecorder):
    """The real recorder, whose writes wait until the test lets them through."""

    def __init__(self, engine):
        super().__init__(engine)
        self.writing = threading.Event()
        self.let_through = threading.Event()

    def record(self, outcomes):
        self.writing.set()
        assert self.let_through.wait(WAIT_S)
        super().record(outcomes)


def test_the_engine_steps_on_while_a_wave_is_written_and_nothing_is_released_before_it_is(
    settings, db, tmp_path
):
    keys = list(
        submitted(settings, db, tmp_path, {f"{i}.txt": f"t {i}" for i in range(8)}).values()
    )
    recorder = HeldRecorder(db)
    engine = FakeEngine()
    drain = Drain(engine, recorder, settings, on_fatal=lambda d: None)
    drain.start()
    try:
        first = [summarize_one(drain, key) for key in keys[:4]]
        assert recorder.writing.wait(WAIT_S)  # the first wave's write has begun, and hangs
        later = [summarize_one(drain, key) for key in keys[4:]]
        wait_until(lambda: drain.admitted == 8 and engine.unfinished() == 0)  # stepped meanwhile
        assert not any(f.done() for f in first + later)  # no chunk is acknowledged unwritten
        recorder.let_through.set()
        assert {f.result(WAIT_S).status for f in first + later} == {"succeeded"}
    finally:
        drain.stop(timeout=5)
    assert sum(recorder.transactions) == 8


def wait_until(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_message_delivered_twice_is_summarized_once(settings, db, tmp_path, run_drain):
    (key,) = submitted(settings, db, tmp_path, {"a.txt": "alpha beta"}).values()
    engine = FakeEngine()
    drain = run_drain(engine)

    both = [summarize_one(drain, key), summarize_one(drain, key)]
    assert [f.result(WAIT_S).status for f in both] == ["succeeded", "succeeded"]
    again = summarize_one(drain, key).result(WAIT_S)

    assert again is Signal.SKIPPED
    assert len(engine.added) == 1
    assert rows_by_name(db)["a.txt"].attempts == 1


def test_a_failing_document_is_retried_with_backoff_then_failed_at_the_limit(
    settings, db, tmp_path, run_drain
):
    keys = submitted(settings, db, tmp_path, {"bad.txt": "poison here", "good.txt": "fine"})
    drain = run_drain(FakeEngine(refuse_on="poison"))
    assert summarize_one(drain, keys["good.txt"]).result(WAIT_S).status == "succeeded"

    tries = [
        summarize_one(drain, keys["bad.txt"]).result(WAIT_S) for _ in range(settings.max_attempts)
    ]

    assert [t.status for t in tries] == ["queued", "queued", "failed"]
    assert [t.retry_in_s for t in tries[:2]] == [retry_delay_s(1), retry_delay_s(2)]
    bad = rows_by_name(db)["bad.txt"]
    assert bad.status == "failed"
    assert bad.attempts == settings.max_attempts
    assert bad.error == "ValueError: the engine refused this prompt (after 3 attempts)"
    assert rows_by_name(db)["good.txt"].status == "succeeded"


def test_a_document_whose_worker_died_too_often_is_failed_without_running(
    settings, db, tmp_path, run_drain
):
    (key,) = submitted(settings, db, tmp_path, {"a.txt": "alpha"}).values()
    with db.begin() as conn:  # as if three workers had died with it in hand
        conn.execute(results.update().values(status="running", attempts=settings.max_attempts))
    engine = FakeEngine()
    drain = run_drain(engine)

    outcome = summarize_one(drain, key).result(WAIT_S)

    assert outcome.status == "failed"
    assert engine.added == []
    row = rows_by_name(db)["a.txt"]
    assert row.status == "failed"
    assert row.error.startswith("gave up after 3 attempts: the worker stopped")


def test_a_document_longer_than_the_context_is_summarized_in_parts(
    settings, db, tmp_path, run_drain
):
    long_text = " ".join(f"w{i}" for i in range(900))
    keys = submitted(settings, db, tmp_path, {"long.txt": long_text, "short.txt": "tiny"})
    engine = FakeEngine(max_model_len=400)
    drain = run_drain(engine)

    outcomes = [summarize_one(drain, k).result(WAIT_S) for k in keys.values()]

    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    long = rows_by_name(db)["long.txt"]
    assert long.parts >= 3
    assert len(engine.added) == long.parts + 1 + 1  # the parts, one combining pass, and short.txt
    assert long.prompt_tokens > 900  # every part's prompt and the combining prompt are counted
    assert long.completion_tokens == 4 * (long.parts + 1)
    assert rows_by_name(db)["short.txt"].parts == 1
    # every request, parts and combining pass alike, ends after the batch's sentences
    assert (
        set(engine.max_sentences.values()) == {settings.sentences_for(settings.instruction)} == {3}
    )


def test_a_batch_submitted_without_a_sentence_limit_asks_for_none(
    settings, db, tmp_path, run_drain
):
    unlimited = settings.with_changes(max_sentences=0)
    keys = submitted(unlimited, db, tmp_path, {"a.txt": "one text"})
    engine = FakeEngine()
    drain = run_drain(engine)

    assert summarize_one(drain, keys["a.txt"]).result(WAIT_S).status == "succeeded"
    assert list(engine.max_sentences.values()) == [None]


def test_each_claim_carries_its_batchs_own_spec_while_specs_are_kept_and_let_go(
    settings, db, tmp_path, monkeypatch
):
    monkeypatch.setattr("worker.recorder.PROMPTS_KEPT", 2)  # a third spec lets the kept go
    keys, said = {}, {}
    for name in ("one", "two", "three"):
        batch = settings.with_changes(instruction=f"Say it as {name} would.")
        texts = {f"{name}-a.txt": f"a {name}", f"{name}-b.txt": f"b {name}"}
        keys |= submitted(batch, db, tmp_path / name, texts, name)
        said |= {keys[file]: f"Say it as {name} would." for file in texts}
    recorder = Recorder(db, retry_s=1)

    first = recorder.claim([keys["one-a.txt"], keys["two-a.txt"]])  # two specs kept
    later = recorder.claim([keys["three-a.txt"], keys["one-b.txt"]])  # a kept one, a new one

    assert {k: c.spec.instruction for k, c in (first | later).items()} == {
        k: said[k] for k in (*first, *later)
    }
    assert len(first | later) == 4


def test_a_document_for_another_model_is_left_queued_for_a_worker_running_it(
    settings, db, tmp_path, run_drain
):
    (key,) = submitted(settings, db, tmp_path, {"a.txt": "alpha"}).values()
    engine = FakeEngine()
    drain = run_drain(engine)
    drain.model = "other-model"

    assert summarize_one(drain, key).result(WAIT_S) is Signal.SKIPPED
    row = rows_by_name(db)["a.txt"]
    assert (row.status, row.attempts, row.error, row.claimed_by) == ("queued", 0, None, None)
    assert engine.added == []


def test_when_the_engine_dies_nothing_is_written_and_the_worker_hands_everything_back(
    settings, db, tmp_path, run_drain
):
    keys = submitted(settings, db, tmp_path, {"a.txt": "boom", "b.txt": "fine"})
    drain = run_drain(FakeEngine(explode_on="boom"))

    futures = [summarize_one(drain, k) for k in keys.values()]
    drain._thread.join(WAIT_S)

    assert drain.fatal == [drain]  # the worker process would exit here, acknowledging nothing
    assert not any(f.done() for f in futures)
    assert {r.status for r in rows_by_name(db).values()} == {"running"}


def test_suspects_of_a_crash_run_apart_from_everyone_else(settings, db, tmp_path, run_drain):
    keys = submitted(settings, db, tmp_path, {f"{i}.txt": f"doc {i}" for i in range(6)})
    names = sorted(keys)
    with db.begin() as conn:  # two documents were in the engine when a worker died
        conn.execute(
            results.update()
            .where(results.c.result_key.in_([keys[names[0]], keys[names[1]]]))
            .values(status="running", attempts=1)
        )
    engine = FakeEngine()
    batches = []
    original = engine.step

    def step():  # which documents are in the engine together, by their text's number
        batches.append({engine.text_of(r[1]).split("doc ")[-1][0] for r in engine.running})
        return original()

    engine.step = step
    drain = run_drain(engine)

    futures = [summarize_one(drain, keys[name]) for name in names]
    assert {f.result(WAIT_S).status for f in futures} == {"succeeded"}

    # The two suspects ran as a group with nothing else in the engine; the rest without them
    # (in one step or more, as they reached the drain).
    suspects = {names[0][0], names[1][0]}
    assert suspects in batches
    assert [b for b in batches if b & suspects and b - suspects] == []
    assert set().union(*batches) == {name[0] for name in names}
    assert rows_by_name(db)[names[0]].attempts == 2
    assert rows_by_name(db)[names[2]].attempts == 1


def test_a_suspect_on_its_last_attempt_runs_alone(settings, db, tmp_path, run_drain):
    keys = submitted(settings, db, tmp_path, {"a.txt": "doc a", "b.txt": "doc b", "c.txt": "c"})
    with db.begin() as conn:
        conn.execute(
            results.update()
            .where(results.c.result_key.in_([keys["a.txt"], keys["b.txt"]]))
            .values(status="running", attempts=settings.max_attempts - 1)
        )
    engine = FakeEngine()
    seen = []
    original = engine.step
    engine.step = lambda: (seen.append(len(engine.running)), original())[1]
    drain = run_drain(engine)

    futures = [summarize_one(drain, k) for k in keys.values()]
    assert {f.result(WAIT_S).status for f in futures} == {"succeeded"}
    assert sorted(seen) == [1, 1, 1]


def test_shutting_down_hands_back_what_has_not_finished_within_the_grace(
    settings, db, tmp_path, run_drain
):
    keys = list(
        submitted(settings, db, tmp_path, {f"{i}.txt": f"d {i}" for i in range(4)}).values()
    )
    gate = threading.Semaphore(0)
    engine = FakeEngine(per_step=1, gate=gate)
    drain = run_drain(engine)
    futures = [summarize_one(drain, k) for k in keys[:3]]
    wait_until(lambda: engine.unfinished() == 3)
    gate.release()  # one finishes
    wait_until(lambda: engine.steps == 1)

    drain.begin_shutdown(grace_s=0)
    late = summarize_one(drain, keys[3])  # arrives while stopping: handed straight back
    gate.release()  # let the loop out of its step

    settled = [f.result(WAIT_S) for f in [*futures, late]]
    statuses = [s if s is Signal.HANDED_BACK else s.status for s in settled]
    assert statuses.count("succeeded") + statuses.count(Signal.HANDED_BACK) == 4
    assert statuses[3] is Signal.HANDED_BACK
    assert Signal.HANDED_BACK in statuses[:3]
    assert engine.unfinished() == 0
    by_key = {r.result_key: r for r in rows_by_name(db).values()}
    for key, status in zip(keys, statuses, strict=True):
        expected = ("succeeded", 1) if status == "succeeded" else ("queued", 0)
        assert (by_key[key].status, by_key[key].attempts) == expected


def test_each_summary_is_written_with_its_quality_signals(settings, db, tmp_path, run_drain):
    keys = submitted(settings, db, tmp_path, {"a.txt": "one two 3 four five six seven eight"})
    drain = run_drain(FakeEngine())
    assert summarize_one(drain, keys["a.txt"]).result(WAIT_S).status == "succeeded"

    row = rows_by_name(db)["a.txt"]
    assert row.summary.startswith("summary of ")  # its count of prompt tokens is not in the text
    assert (row.repetition, row.novel_numbers, row.looped) == (0.0, 1, False)
    assert row.copied == 0.0
    assert row.compression == pytest.approx(4 / 8)  # 4 summary tokens over 8 document tokens


def test_a_summary_that_loops_is_generated_again_once_with_loop_breaking_settings(
    settings, db, tmp_path, run_drain
):
    keys = submitted(
        settings, db, tmp_path, {"loopy.txt": "a loopy text", "stuck.txt": "a stuck text"}
    )
    engine = FakeEngine()
    drain = run_drain(engine)
    outcomes = [summarize_one(drain, key).result(WAIT_S) for key in keys.values()]

    assert [o.status for o in outcomes] == ["succeeded", "succeeded"]
    found = rows_by_name(db)
    assert found["loopy.txt"].summary.startswith("summary of")  # the second answer did not loop
    assert found["loopy.txt"].looped is False
    assert found["stuck.txt"].summary == LOOP.strip()
    assert found["stuck.txt"].looped is True  # kept, and flagged
    assert len(engine.added) == 4 and len(engine.loop_breaking) == 2  # each asked twice, no more
    assert found["loopy.txt"].completion_tokens == 8  # both generations are counted


class ThreadNotingEngine(FakeEngine):
    """Notes the threads it is built and stepped on."""

    def __init__(self):
        super().__init__()
        self.built_on = threading.current_thread()
        self.stepped_on: set[threading.Thread] = set()

    def step(self):
        self.stepped_on.add(threading.current_thread())
        return super().step()


def test_the_engine_is_built_on_the_thread_that_steps_it(settings, db, tmp_path):
    keys = submitted(settings, db, tmp_path, {"a.txt": "one two three"})
    drain = Drain.built_on_its_thread(ThreadNotingEngine, Recorder(db), settings)
    try:
        assert summarize_one(drain, keys["a.txt"]).result(WAIT_S).status == "succeeded"
    finally:
        drain.stop(timeout=5)
    assert drain.engine.built_on is not threading.current_thread()
    assert drain.engine.stepped_on == {drain.engine.built_on}


def test_the_cycle_collector_rests_while_the_engine_is_built_and_runs_after(
    settings, db, monkeypatch
):
    """worker/runtime.collector_paused: building vLLM's engine makes objects by the hundred
    thousand, and each automatic full collection walked them all again."""
    seen = []

    def noting(_settings):
        seen.append(gc.isenabled())
        return FakeEngine()

    monkeypatch.setattr(runtime, "build_engine", noting)
    assert gc.isenabled()
    runtime.build(settings).stop(timeout=5)
    assert seen == [False]
    assert gc.isenabled()


def test_an_engine_that_cannot_be_built_raises_in_the_callers_thread(settings, db):
    def refused():
        raise RuntimeError("no model here")

    with pytest.raises(RuntimeError, match="no model here"):
        Drain.built_on_its_thread(refused, Recorder(db), settings)
