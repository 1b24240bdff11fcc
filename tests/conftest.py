"""Shared fixtures: settings pointed at a temporary data directory, real Redis, real databases."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner, Result

from jobs import database
from jobs.cli import main
from jobs.settings import Settings


def _lee() -> Path:
    """The 300 news articles beside the checkout (../shared), or where SUMMARIZE_TEST_CORPUS says."""
    candidates = [
        os.environ.get("SUMMARIZE_TEST_CORPUS"),
        Path(__file__).resolve().parents[2] / "shared" / "corpus" / "lee-background",
        "/work/shared/corpus/lee-background",
    ]
    for candidate in filter(None, candidates):
        if len(list(Path(candidate).glob("*.txt"))) >= 300:
            return Path(candidate)
    raise RuntimeError(
        "The lee-background corpus is not beside the checkout (../shared/corpus/lee-background): "
        "set SUMMARIZE_TEST_CORPUS to its folder."
    )


LEE = _lee()
REDIS_URL = os.environ.get("SUMMARIZE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get(
    "SUMMARIZE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


@pytest.fixture
def redis_url() -> str:
    """The real Redis of this machine, database 15, emptied for each test."""
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield REDIS_URL
    client.flushdb()
    client.close()


@pytest.fixture
def queue_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def _reset_postgres() -> None:
    engine = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """Each test that takes this runs twice: on a SQLite file and on the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'summarize.db'}"
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
    engine = database.connect(settings)
    database.ensure_schema(settings, engine)
    yield engine
    engine.dispose()


@pytest.fixture
def week(settings, db, tmp_path) -> sa.Engine:
    """Monday's and tuesday's batches, made for real by tests/batches.py; yields the database."""
    from tests.batches import make_week  # it imports this module (through tests.test_drain)

    make_week(settings, db, tmp_path)
    return db


@pytest.fixture(scope="module")
def model() -> Path:
    """The real default model, looked up (or fetched) once per test module."""
    from tests.stack import model_dir  # it imports this module

    return model_dir()


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def run(env: dict[str, str], *args: str) -> Result:
    """The `summarize` CLI in this process: exceptions propagate instead of becoming exit code 1."""
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
