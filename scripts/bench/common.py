"""What the benchmark's modes share: where things are, the corpus as `submit` reads it, a
running worker, generated files, and timing a command."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus" / "lee-background"
SAMPLES = ROOT / "samples"  # warm-up documents, distinct from the measured ones
SUMMARIZE = [sys.executable, "-m", "summarize.cli"]


def documents(folder: Path, limit: int | None) -> list[str]:
    """The folder's documents as `submit` reads them, each distinct text once, in walk order.

    `submit` summarizes a text that appears twice in a batch once; giving every mode only
    distinct texts keeps them doing the same work (lee-background holds 7 repeats).
    """
    from core.settings import Settings
    from jobs import corpus, folders
    from jobs.documents import Text

    max_bytes = Settings.from_env().max_doc_bytes
    texts: dict[str, str] = {}
    for found in folders.walk([folder]):
        if found.kind == "document":
            text = corpus.read(found.path, max_bytes)
            if isinstance(text, Text):
                texts.setdefault(text.content_hash, text.body)
    return list(texts.values())[:limit]


@contextlib.contextmanager
def running_worker(env: dict, work: Path):
    """A `summarize worker` for the length of the block, its output in work/worker.log; the
    scratch folder `work` (the run's corpus and data) is removed after."""
    log = open(work / "worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [*SUMMARIZE, "worker"], env=env, stdout=log, stderr=log, start_new_session=True
    )
    try:
        yield worker
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


VOCABULARY = [
    "council",
    "river",
    "school",
    "budget",
    "storm",
    "league",
    "minister",
    "harbour",
    "bakery",
    "museum",
    "report",
    "vote",
    "road",
    "library",
    "hospital",
    "market",
    "festival",
    "court",
    "station",
    "bridge",
]  # generated documents' words


def make_files(folder: Path, count: int, words: int = 40) -> None:
    """Small, distinct news-like documents in folders of 1,000."""
    rng = random.Random(count)
    for i in range(count):
        sub = folder / f"{i // 1000:04d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        body = " ".join(rng.choice(VOCABULARY) for _ in range(words))
        (sub / f"{i:07d}.txt").write_text(f"Document {i}. {body}.\n")


def echo_place(name: str) -> tuple[Path, dict]:
    """A temporary folder and the environment of a run with the instant engine, its data and
    queue its own."""
    work = Path(tempfile.mkdtemp(prefix=f"summarize-{name}-"))
    return work, os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_MODEL": "echo",
        "SUMMARIZE_QUEUE": f"{name}-{os.getpid()}",
    }


def timed(command: list[str], env: dict, out: Path) -> dict:
    """Run a command to its end, its output to `out`: wall seconds and peak memory."""
    started = time.perf_counter()
    with open(out, "wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed:\n{out.read_text()[-3000:]}")
    return {"seconds": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss / 1024}


def database_bytes(db) -> int:
    """Bytes the tables and indexes take once compacted (what a long-lived database settles at:
    space freed by dropped texts is reused by the next nights' rows)."""
    import sqlalchemy as sa

    with db.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("VACUUM FULL"))
            return conn.execute(
                sa.text(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relkind = 'r'"
                )
            ).scalar_one()
        compacted = Path(tempfile.mkdtemp()) / "compacted.db"
        conn.exec_driver_sql(f"VACUUM INTO '{compacted}'")
        size = compacted.stat().st_size
        shutil.rmtree(compacted.parent)
        return size


def empty_postgres_if_asked(settings, args, mode: str) -> None:
    """A PostgreSQL database is emptied first, and only when --empty-database says so."""
    if not settings.database_url.startswith("postgresql"):
        return
    if not args.empty_database:
        raise SystemExit(
            f"{mode} empties the PostgreSQL database it is given: "
            "add --empty-database if that is what you want"
        )
    empty_postgres(settings.database_url)


def empty_postgres(url: str) -> None:
    import sqlalchemy as sa

    db = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with db.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))
    db.dispose()


def latin(text: str) -> str:
    """Text fpdf2's core fonts can draw."""
    return text.encode("latin-1", "replace").decode("latin-1")


def place(work: Path, name: str) -> dict:
    return os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{name}-{os.getpid()}",
    }


def submit_measured(folder: Path, env: dict, log: Path, cwd: Path = ROOT) -> dict:
    """`summarize submit` of the folder: wall seconds, and the peak of its memory with its
    extraction processes' (resident set sizes summed, sampled every 20 ms)."""
    return measured([*SUMMARIZE, "submit", str(folder), "--batch", "bench"], env, log, cwd)


def measured(command: list[str], env: dict, log: Path, cwd: Path = ROOT) -> dict:
    """A command run to its end, its output to `log`: wall seconds, and the peak of its
    memory with its children's, sampled (wait4's maximum would count the pages a forked
    child shares with this process before it runs the command)."""
    import psutil

    started = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
        peak = [0]
        sampler = threading.Thread(target=_sample, args=(psutil.Process(process.pid), peak))
        sampler.start()
        status = process.wait()
        sampler.join()
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{' '.join(command[3:5])} failed:\n{log.read_text()[-3000:]}")
    return {"seconds": seconds, "peak_tree_mb": peak[0] / 2**20}


def _sample(process, peak: list[int]) -> None:
    import psutil

    while True:
        try:
            tree = [process, *process.children(recursive=True)]
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return
        time.sleep(0.02)
