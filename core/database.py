"""Connections to the SQL database: engines, the schema's migration state, and retries.

The database is the source of truth; every other part can be rebuilt from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from core.errors import DatabaseUnavailable, NoDatabase, SettingsError
from core.files import private_file, private_folder
from core.settings import Settings, redact_url
from core.tables import ROLLUPS

log = logging.getLogger(__name__)

T = TypeVar("T")

# The newest migration; `ensure_schema` upgrades a database that is behind it.
# tests/test_migrations.py checks that it matches migrations/versions.
SCHEMA_REVISION = "0015"

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def connect(settings: Settings, *, readonly: bool = False, **options) -> sa.Engine:
    """An engine for SUMMARIZE_DATABASE_URL; SQLite gets WAL mode and a busy timeout."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        path = url.database
        if path and path != ":memory:" and not readonly:
            _sqlite_file(settings, Path(path))
        if readonly and path:  # quoted: a `?` or `#` in the path must not end it early
            url = url.set(database=f"file:{quote(path)}?mode=ro", query={"uri": "true"})
        db = sa.create_engine(url, connect_args={"timeout": 30}, **options)
        event.listen(db, "connect", _sqlite_pragmas)
        return db
    # Plans made for the values at hand: psycopg prepares a statement after a few runs, and a
    # generic plan made while `results` was nearly empty (a sequential scan) would be kept as
    # it grows, without autovacuum's ANALYZE: a submit slowed from 1,300 to 100 documents a
    # second between 60,000 and 90,000 rows.
    server = "-c plan_cache_mode=force_custom_plan"
    if readonly:
        server += " -c default_transaction_read_only=on"
    connect_args = {"connect_timeout": 5, "options": server}
    return sa.create_engine(url, pool_pre_ping=True, connect_args=connect_args, **options)


def _sqlite_file(settings: Settings, path: Path) -> None:
    """The database file, made for this user alone. Only the data directory is made on its
    own: a file named elsewhere whose folder is missing is a mistyped URL, refused."""
    folder = path.parent
    if not folder.is_dir():
        if folder.resolve() != settings.data_dir.resolve():
            raise SettingsError(
                f"SUMMARIZE_DATABASE_URL names {path}, in a folder that does not exist "
                f"({folder}): create the folder, or fix the URL."
            )
        private_folder(folder)
    private_file(path)


def existing(settings: Settings) -> sa.Engine:
    """An engine on a database summarize has written to, for commands that read it: they
    never make one (a mistyped URL must not look like an empty database). NoDatabase if
    there is none yet."""
    url = make_url(settings.database_url)
    path = url.database if url.get_backend_name() == "sqlite" else None
    if path and path != ":memory:" and not Path(path).exists():
        raise NoDatabase(
            f"No database at {path} yet: `summarize submit PATH` makes it (or fix "
            "SUMMARIZE_DATABASE_URL, if it names another)."
        )
    db = connect(settings)
    try:
        revision = current_revision(db)
    except OperationalError as exc:
        raise unavailable(settings, exc) from exc
    if revision is None:
        db.dispose()
        raise NoDatabase(
            f"No summarize tables in the database at {describe(settings)} yet: "
            "`summarize submit PATH` makes them."
        )
    ensure_schema(settings, db)
    return db


def vacuum_rollups(db: sa.Engine) -> None:
    """PostgreSQL: VACUUM the rollup tables. Each statement that changes rows updates their
    rollup rows and leaves the old versions behind; without autovacuum (off, or behind) they
    grow with every batch, and every reader reads them all (docs/performance.md says how
    much). Done often, it takes milliseconds.
    It only keeps readers fast: a failure is a warning (a role that does not own the tables
    gets one from the server)."""
    if db.dialect.name != "postgresql":
        return
    try:
        with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text(f"VACUUM {', '.join(t.name for t in ROLLUPS)}"))
    except sa.exc.SQLAlchemyError as exc:
        log.warning("could not vacuum the rollups (readers may slow down): %s", exc)


def refresh_statistics(db: sa.Engine) -> None:
    """PostgreSQL: ANALYZE the tables a submit grows. Without statistics (autovacuum off, or
    not round yet) the planner believes `results` holds the few pending rows it held when
    last analyzed, and the worker's claims and writes scan every pending row for their keys
    instead of looking them up, at a cost a document that grows with the queue.
    A role that does not own the tables gets a warning from the server, not an error."""
    if db.dialect.name != "postgresql":
        return
    with db.begin() as conn:
        conn.execute(sa.text("ANALYZE results, documents"))


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def is_transient(exc: BaseException) -> bool:
    """A connection-level failure worth retrying: the server went away or is restarting."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError):
        text = str(exc.orig).lower()
        return not any(word in text for word in ("syntax", "no such table", "no such column"))
    return False


def retrying(seconds: float) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Retry transient database errors with backoff for up to `seconds`, logging each retry."""
    return retry(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential(multiplier=0.2, max=5),
        stop=stop_after_delay(seconds),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


def describe(settings: Settings) -> str:
    return redact_url(settings.database_url)


def unavailable(settings: Settings, exc: BaseException) -> DatabaseUnavailable:
    reason = (
        str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc) else type(exc).__name__
    )
    return DatabaseUnavailable(
        f"The database at {describe(settings)} is not reachable ({reason}): start it, "
        "or fix SUMMARIZE_DATABASE_URL (unset it to use the SQLite file in the data directory)."
    )


def current_revision(db: sa.Engine) -> str | None:
    """The Alembic revision the database is at, or None for an empty database."""
    with db.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def alembic_config(settings: Settings):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", settings.database_url.replace("%", "%%"))
    return config


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Run the migrations up to `revision`, one process at a time."""
    from alembic import command

    try:
        with _migration_lock(settings):
            command.upgrade(alembic_config(settings), revision)
    except OperationalError as exc:
        raise unavailable(settings, exc) from exc


def ensure_schema(settings: Settings, db: sa.Engine) -> None:
    """Bring an empty or older database up to the schema this code expects."""
    try:
        revision = current_revision(db)
    except OperationalError as exc:
        raise unavailable(settings, exc) from exc
    if revision != SCHEMA_REVISION:
        upgrade(settings)


def ready(settings: Settings) -> sa.Engine:
    """An engine on SUMMARIZE_DATABASE_URL, its schema brought up to date first."""
    db = connect(settings)
    ensure_schema(settings, db)
    return db


@contextlib.contextmanager
def _migration_lock(settings: Settings) -> Iterator[None]:
    """Serialize migrations: a lock file beside a SQLite database, an advisory lock on PostgreSQL."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "summarize.db")
        if url.database and url.database != ":memory:":
            _sqlite_file(settings, path)
        lock_path = path.with_suffix(".migrate.lock")
        with open(private_file(lock_path), "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        return
    db = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with db.connect() as conn:
        conn.execute(sa.text("SELECT pg_advisory_lock(7263510)"))
        try:
            yield
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(7263510)"))
    db.dispose()


@dataclass(frozen=True)
class Prepared:
    """A statement compiled once for a dialect and run through the driver: its text never
    changes, so neither SQLAlchemy nor the database makes it again (building, caching and
    expanding a statement cost a claim more in SQLAlchemy than SQLite took to run it)."""

    sql: str
    order: tuple[str, ...] | None  # the parameters' order (SQLite), or None: by name
    defaults: dict[str, object]
    processors: dict[str, Callable]

    @classmethod
    def of(cls, statement: sa.Executable, dialect: sa.Dialect) -> Prepared:
        compiled = statement.compile(dialect=dialect)
        processors = {}
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors[name] = process
        order = tuple(compiled.positiontup) if compiled.positional else None
        return cls(compiled.string, order, dict(compiled.params), processors)

    def execute(self, conn: sa.Connection, **values) -> sa.CursorResult:
        values = self.defaults | values
        for name, process in self.processors.items():
            values[name] = process(values[name])
        if self.order is not None:
            return conn.exec_driver_sql(self.sql, tuple(values[name] for name in self.order))
        return conn.exec_driver_sql(self.sql, values)


def one_of(column: sa.ColumnElement, name: str, dialect: sa.Dialect) -> sa.ColumnElement[bool]:
    """`column IN (the list bound as name)` whose text is the same for any number of values:
    `= ANY(array)` on PostgreSQL, the elements of a JSON array on SQLite."""
    if dialect.name == "postgresql":
        return column == sa.any_(sa.cast(sa.bindparam(name), ARRAY(column.type)))
    listed = sa.func.json_each(sa.bindparam(name, type_=sa.JSON)).table_valued("value")
    return column.in_(sa.select(listed.c.value))


def insert(db: sa.Engine, table: sa.Table):
    """An INSERT in the engine's dialect, which can say what to do ON CONFLICT."""
    if db.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def insert_ignoring_conflicts(db: sa.Engine, table: sa.Table):
    """An INSERT that skips rows whose unique key exists already, in the engine's dialect."""
    return insert(db, table).on_conflict_do_nothing()
