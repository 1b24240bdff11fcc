"""The worker's Prometheus metrics: what it wrote, what it holds, what waits, per model."""

from __future__ import annotations

import signal
import socket
import time

import pytest
import redis
from prometheus_client import REGISTRY

from jobs.submit import submit as submit_files
from tests.helpers import write
from tests.services import free_port
from tests.stack import Worker, cli, embedded_env, scrape
from worker import metrics
from worker.recorder import TEXT_GONE
from worker.work import Outcome


def value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_written_outcomes_are_counted_by_status_tokens_and_reason():
    before = {
        "ok": value("summarize_documents_total", status="succeeded"),
        "failed": value("summarize_documents_total", status="failed"),
        "prompt": value("summarize_tokens_total", kind="prompt"),
        "completion": value("summarize_tokens_total", kind="completion"),
        "too_long": value("summarize_failures_total", reason="too_long"),
        "engine": value("summarize_failures_total", reason="engine_error"),
        "retries": value("summarize_retries_total"),
    }

    metrics.observe(
        [
            Outcome("k1", "succeeded", prompt_tokens=100, completion_tokens=20),
            Outcome("k2", "succeeded", prompt_tokens=50, completion_tokens=10, cached_tokens=5),
            Outcome("k3", "failed", error="document too long: still too long after 4 rounds"),
            Outcome("k4", "failed", error="ValueError: the engine refused this prompt"),
            Outcome("k5", "queued", error="ValueError: x (attempt 1, trying again)"),
        ]
    )

    assert value("summarize_documents_total", status="succeeded") - before["ok"] == 2
    assert value("summarize_documents_total", status="failed") - before["failed"] == 2
    assert value("summarize_tokens_total", kind="prompt") - before["prompt"] == 150
    assert value("summarize_tokens_total", kind="completion") - before["completion"] == 30
    assert value("summarize_failures_total", reason="too_long") - before["too_long"] == 1
    assert value("summarize_failures_total", reason="engine_error") - before["engine"] == 1
    assert value("summarize_retries_total") - before["retries"] == 1


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("gave up after 3 attempts: the worker stopped", "worker_died"),
        (TEXT_GONE, "text_gone"),
        ("RuntimeError: CUDA out of memory", "engine_error"),
        (None, "engine_error"),
    ],
)
def test_a_failure_has_one_of_a_few_reasons_not_its_whole_text(error, reason):
    assert metrics.reason(error) == reason


def test_queued_documents_are_counted_per_model_from_the_rollups(settings, db, tmp_path):
    write(tmp_path / "a", "one.txt", "One document.")
    write(tmp_path / "a", "two.txt", "Another document.")
    write(tmp_path / "b", "three.txt", "A third.")
    client = redis.Redis.from_url(settings.broker_url)
    submit_files(settings, db, client, [str(tmp_path / "a")], "first")
    submit_files(settings.with_changes(model="other-model"), db, client, [str(tmp_path / "b")], "x")
    live = metrics.Live()
    assert list(live.collect()) == []  # not attached yet: the engine is still loading

    live.attach(db, lambda: 7)
    families = {f.name: f for f in live.collect()}

    assert [s.value for s in families["summarize_documents_in_flight"].samples] == [7]
    queued = {s.labels["model"]: s.value for s in families["summarize_queue_depth"].samples}
    assert queued == {settings.model_name: 2, "other-model": 1}


def test_a_running_worker_serves_its_metrics_for_prometheus(tmp_path, redis_url, queue_name):
    port = free_port()
    env = embedded_env(tmp_path, redis_url, queue_name, "echo") | {
        "SUMMARIZE_METRICS_PORT": str(port)
    }
    for i in range(5):
        write(tmp_path / "in", f"{i}.txt", f"Document {i} is here. It has two sentences.")

    with Worker(env, tmp_path / "worker.log") as worker:
        worker.wait_ready(120)
        assert cli(env, "submit", str(tmp_path / "in"), "--batch", "m").returncode == 0
        deadline = time.monotonic() + 60
        while (
            scrape(port).get(("summarize_documents_total", (("status", "succeeded"),))) != 5
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        found = scrape(port)
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.tail()

    assert found[("summarize_documents_total", (("status", "succeeded"),))] == 5
    assert found[("summarize_tokens_total", (("kind", "completion"),))] == 5 * 4
    assert found[("summarize_documents_in_flight", ())] == 0
    assert found[("summarize_queue_depth", (("model", "echo"),))] == 0
    assert f"metrics on http://127.0.0.1:{port}/metrics" in worker.log_path.read_text()


def test_a_metrics_port_in_use_stops_the_worker_at_once_with_the_fix(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {
            "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
            "SUMMARIZE_MODEL": "echo",
            "SUMMARIZE_METRICS_PORT": str(port),
        }
        done = cli(env, "worker", "--burst")

    assert done.returncode == 1
    assert (
        f"Error: SUMMARIZE_METRICS_PORT={port}: cannot serve metrics on 127.0.0.1:{port} "
        "(Address already in use): choose a free port, or unset it to serve none."
    ) in done.stderr
