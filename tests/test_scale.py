"""More than one worker: two worker processes on one Redis and one PostgreSQL share a batch.

Run here on one machine, as they would on two GPUs or two hosts: each document is summarized
exactly once, both workers take part, and the nightly script sees the batch through.
"""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import date
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, _reset_postgres
from tests.stack import Worker, copy_lee, model_dir, rows

pytestmark = pytest.mark.engine
NIGHTLY = Path(__file__).resolve().parents[1] / "scripts" / "nightly"


def test_two_workers_share_a_batch_and_each_document_is_summarized_once(
    tmp_path, redis_url, queue_name
):
    _reset_postgres()
    corpus = copy_lee(tmp_path / "corpus", 230, 32)
    env = {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": POSTGRES_URL,
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": str(model_dir()),
        "SUMMARIZE_MAX_TOKENS": "32",
        "SUMMARIZE_MAX_MODEL_LEN": "1024",
        "SUMMARIZE_MAX_NUM_SEQS": "8",
        "SUMMARIZE_IN_FLIGHT": "8",  # small hands and chunks, so that both workers get a share
        "SUMMARIZE_CHUNK_DOCS": "4",
        "SUMMARIZE_GPU_MEMORY_UTILIZATION": "0.12",  # two engines on one host's memory
    }
    first = Worker(env, tmp_path / "worker-a.log")
    second = Worker(env, tmp_path / "worker-b.log")
    try:
        # Both take messages before the batch exists: otherwise the first to load its model
        # could summarize everything while the second is still starting.
        first.wait_ready()
        second.wait_ready()
        done = subprocess.run(
            [str(NIGHTLY), str(corpus), "--deadline", "20m"],
            env=os.environ | env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr + first.tail() + second.tail()
        assert f"nightly-{date.today():%Y-%m-%d}: every document succeeded" in done.stderr
        for worker in (first, second):
            worker.signal(signal.SIGTERM)
            assert worker.wait(120) == 0, worker.tail()
    finally:
        first.kill()
        second.kill()

    final = rows()
    assert sorted(r.source_path.rsplit("/", 1)[-1] for r in final) == sorted(
        p.name for p in corpus.iterdir()
    )
    assert {r.status for r in final} == {"succeeded"}
    assert {r.attempts for r in final} == {1}  # nobody took a document another worker had
    shares = [w.summarized() for w in (first, second)]
    assert all(share > 0 for share in shares), shares
    assert sum(shares) == len({r.result_key for r in final})
    print(
        f"\ntwo workers: {shares[0]} and {shares[1]} documents, {len(final)} rows, attempts 1 each"
    )
