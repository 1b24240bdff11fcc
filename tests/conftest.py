"""Shared fixtures: settings pointed at a temporary data directory, real Redis, real databases."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import sqlalchemy as sa

from core import database
from core.broker import answers, redis_server_binary
from core.settings import Settings
from tests.helpers import CountingRecorder
from worker.drain import Drain

REQUIRE_SERVICES = os.environ.get("SUMMARIZE_TEST_REQUIRE_SERVICES") == "1"  # set by .ci/run
POSTGRES_URL = os.environ.get(
    "SUMMARIZE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/15"
SLOW = ("engine", "browser", "compose", "services")  # each of these markers also means `slow`


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        params = getattr(item, "callspec", None)
        if params and params.params.get("database_url") == "postgresql":
            item.add_marker(pytest.mark.services)
        if any(item.get_closest_marker(name) for name in SLOW):
            item.add_marker(pytest.mark.slow)


@functools.cache
def lee() -> Path:
    """The 300 news articles beside the checkout (../shared), or where SUMMARIZE_TEST_CORPUS says."""
    candidates = [
        os.environ.get("SUMMARIZE_TEST_CORPUS"),
        Path(__file__).resolve().parents[2] / "shared" / "corpus" / "lee-background",
        "/work/shared/corpus/lee-background",
    ]
    for candidate in filter(None, candidates):
        if len(list(Path(candidate).glob("*.txt"))) >= 300:
            return Path(candidate)
    pytest.fail(
        "The lee-background corpus is not beside the checkout (../shared/corpus/lee-background): "
        "set SUMMARIZE_TEST_CORPUS to its folder."
    )


def missing_service(what: str, fix: str) -> None:
    """A server the test needs is not there: a failure in CI, a skip on a contributor's machine."""
    message = f"{what} is not reachable: {fix}"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (SUMMARIZE_TEST_REQUIRE_SERVICES=1: a missing service fails)")
    pytest.skip(message)


def _answers(url: str) -> bool:
    return answers(redis.Redis.from_url(url, socket_connect_timeout=1))


def _own_database(url: str) -> str:
    """The URL's database (15 by default), or the ones below it for the other pytest-xdist
    workers (`-n 2`: 15 and 14), so that each flushes only its own."""
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    return urlunsplit(parts._replace(path=f"/{number - worker}"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> str:
    """SUMMARIZE_TEST_REDIS_URL; else the Redis on 127.0.0.1:6379 (database 15); else, outside CI,
    a redis-server of the tests' own (the binary the embedded broker uses)."""
    configured = os.environ.get("SUMMARIZE_TEST_REDIS_URL")
    if configured or _answers(LOCAL_REDIS_URL) or REQUIRE_SERVICES:
        yield _own_database(configured or LOCAL_REDIS_URL)
        return
    folder = tmp_path_factory.mktemp("redis")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(
        [redis_server_binary(), *options, "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = _own_database(f"redis://127.0.0.1:{port}/15")
    for _ in range(100):
        if _answers(url):
            break
        time.sleep(0.05)
    yield url
    server.terminate()
    server.wait(10)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server (tests/services.py), started once for the session."""
    from tests.services import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3_server, monkeypatch):
    """A new, empty bucket on the S3 server, with botocore's variables pointing at it in this
    process (a CLI subprocess gets `bucket.env`)."""
    from tests.services import Bucket

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return Bucket.made(f"test-{uuid.uuid4().hex[:12]}", s3_server.env)


@pytest.fixture
def redis_url(redis_server) -> str:
    """A real Redis (see `redis_server`), database 15, emptied for each test."""
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield redis_server
    client.flushdb()
    client.close()


@pytest.fixture
def queue_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def _reset_postgres() -> None:
    db = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
    with db.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))
    db.dispose()


def _postgres_answers() -> bool:
    db = sa.create_engine(
        POSTGRES_URL, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 2}
    )
    try:
        with db.connect():
            return True
    except sa.exc.OperationalError:
        return False
    finally:
        db.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """Each test that takes this runs twice: on a SQLite file and on the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'summarize.db'}"
    if not _postgres_answers():
        missing_service(
            f"PostgreSQL at {POSTGRES_URL}", "start it, or set SUMMARIZE_TEST_POSTGRES_URL"
        )
    _reset_postgres()
    return POSTGRES_URL


@pytest.fixture
def env(tmp_path, redis_url, database_url, queue_name) -> dict[str, str]:
    """SUMMARIZE_* variables for a test: its own data directory, queue, Redis and database."""
    return {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_DATABASE_URL": database_url,
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
    }


@pytest.fixture
def settings(env) -> Settings:
    return Settings.from_env(env)


@pytest.fixture
def db(settings) -> sa.Engine:
    db = database.connect(settings)
    database.ensure_schema(settings, db)
    yield db
    db.dispose()


@pytest.fixture
def week(settings, db, tmp_path) -> sa.Engine:
    """Monday's and tuesday's batches, made for real by tests/batches.py; yields the database."""
    from tests.batches import make_week  # it imports this module

    make_week(settings, db, tmp_path)
    return db


@pytest.fixture(scope="module")
def model() -> Path:
    """The real default model, looked up (or fetched) once per test module."""
    from tests.stack import model_dir  # it imports this module

    return model_dir()


@pytest.fixture
def run_drain(settings, db):
    started = []

    def start(engine, **kwargs) -> Drain:
        fatal = []
        drain = Drain(engine, CountingRecorder(db), settings, on_fatal=fatal.append, **kwargs)
        drain.fatal = fatal
        drain.start()
        started.append(drain)
        return drain

    yield start
    for drain in started:
        drain.stop(timeout=5)
