"""Text taken out of web pages, PDFs and Word files in processes of their own.

A PDF or Word file is a program for a library to run, and one made to hurt can take
minutes, gigabytes, or the process that reads it. So `submit` never reads one itself:
a few extraction processes (SUMMARIZE_EXTRACT_PROCESSES, one a core by default) each
take one file at a time, under a memory limit (SUMMARIZE_EXTRACT_MEMORY_MB beyond what
the libraries take) and a time limit (SUMMARIZE_EXTRACT_TIMEOUT_S). A file that passes
either, or whose process dies, is its own failed row, and a new process takes the next
file. `submit` opens each file (jobs/corpus.py says how) and hands it over open, so its
bytes never pass through `submit`'s memory.

`in_order` keeps the processes busy while `submit` goes on in the walk's order: it
starts a few files ahead, and yields each document once those before it are done.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing import connection, reduction

from core.errors import SummarizeError
from jobs import formats
from jobs.corpus import Container
from jobs.documents import Text, Unreadable

START_TIMEOUT_S = 60.0  # for a process to import the libraries and say it is ready
AHEAD_PER_PROCESS = 4  # files started ahead of the one `submit` waits for, a process
QUEUED_PER_PROCESS = 2  # files a process holds: the next is there when it ends one


class ExtractionUnavailable(SummarizeError):
    """The extraction processes cannot start on this machine."""


@dataclass
class _Job:
    container: Container
    answer: Text | Unreadable | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def answered(self, answer: Text | Unreadable) -> None:
        self.container.handle.close()
        self.answer = answer
        self.done.set()


class _Process:
    """One extraction process and the file it is reading, if any. It is a fresh
    interpreter, not a fork: nothing of submit's state (connections, the embedded Redis's
    exit handlers) is copied into it, and it imports no module of the caller's."""

    def __init__(self, memory_mb: int, timeout_s: float):
        ours, theirs = socket.socketpair()  # open files pass along a socket
        code = (
            f"from jobs.extraction import serve; serve({theirs.fileno()}, {memory_mb}, {timeout_s})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[theirs.fileno()],
            env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, sys.path))},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # nothing a library prints may reach submit's output
            stderr=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = connection.Connection(ours.detach())
        self.ready = False
        self.jobs: deque[_Job] = deque()  # the first is being read; the rest wait in the socket
        self.deadline = time.monotonic() + START_TIMEOUT_S  # of starting, or of the first job

    def give(self, job: _Job, timeout_s: float) -> None:
        self.jobs.append(job)
        if len(self.jobs) == 1:
            self.deadline = time.monotonic() + timeout_s
        container = job.container
        self.conn.send((container.kind, container.limit, container.max_bytes))
        reduction.send_handle(self.conn, container.handle.fileno(), self.process.pid)

    def took(self, timeout_s: float) -> _Job:
        """The first job, answered: the next one's time starts now."""
        job = self.jobs.popleft()
        self.deadline = time.monotonic() + timeout_s if self.jobs else float("inf")
        return job

    def exitcode(self) -> int | None:
        try:
            return self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        self.conn.close()  # it reads EOF and exits
        try:
            self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Extractors:
    """The extraction processes of one submit; use it as a context manager.

    A thread of its own hands files to the processes and takes their answers, so they
    stay busy while submit writes a chunk to the database: the thread waits in `select`
    and holds the interpreter only to pass a file on or take a text back.
    """

    def __init__(self, processes: int, timeout_s: float, memory_mb: int):
        self.most, self.timeout_s, self.memory_mb = processes, timeout_s, memory_mb
        self.processes: list[_Process] = []  # the thread's own
        self.waiting: deque[_Job] = deque()
        self.failure: SummarizeError | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    def __enter__(self) -> Extractors:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stopping = True
        if self._thread is not None:
            self._wake()
            self._thread.join()
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)
        for job in self.waiting:
            job.container.handle.close()
        self.waiting.clear()

    def in_order(
        self, entries: Iterable[Text | Unreadable | Container | Iterator]
    ) -> Iterator[Text | Unreadable]:
        """Each entry's documents, in the entries' order: a document read already, a
        container whose text is taken out here, or an iterator of documents (a record
        file's), which streams once everything before it is out."""
        ahead: deque[Text | Unreadable | _Job] = deque()
        window = AHEAD_PER_PROCESS * self.most
        for entry in entries:
            if isinstance(entry, Iterator):
                while ahead:
                    yield self._result(ahead.popleft())
                yield from entry
                continue
            ahead.append(self._start(entry) if isinstance(entry, Container) else entry)
            while ahead and (len(ahead) > window or _done(ahead[0])):
                yield self._result(ahead.popleft())
        while ahead:
            yield self._result(ahead.popleft())

    def text(self, container: Container) -> Text | Unreadable:
        """One container's text, taken out by an extraction process."""
        return self._result(self._start(container))

    def _start(self, container: Container) -> _Job:
        job = _Job(container)
        with self._lock:
            if self.failure is not None:
                container.handle.close()
                raise self.failure
            self.waiting.append(job)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="summarize-extraction", daemon=True
            )
            self._thread.start()
        self._wake()
        return job

    def _result(self, item: Text | Unreadable | _Job) -> Text | Unreadable:
        if not isinstance(item, _Job):
            return item
        item.done.wait()
        if item.answer is None:
            raise self.failure
        return item.answer

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a wake-up is pending already
            os.write(self._wake_write, b"w")

    def _run(self) -> None:
        """The thread: hand files out and take answers until the submit closes us."""
        try:
            while not self._stopping:
                self._hand_out()
                self._turn()
        except SummarizeError as exc:
            with self._lock:
                self.failure = exc
                for job in [*self.waiting, *(j for p in self.processes for j in p.jobs)]:
                    job.done.set()
        finally:
            for process in self.processes:
                process.stop()
                for job in process.jobs:
                    job.container.handle.close()
            self.processes.clear()

    def _hand_out(self) -> None:
        """Give waiting files to idle processes, starting processes up to the most."""
        for process in list(self.processes):
            while self.waiting and process.ready and len(process.jobs) < QUEUED_PER_PROCESS:
                try:
                    process.give(self.waiting.popleft(), self.timeout_s)
                except OSError:  # it died between two files
                    self._end(process, _died(process.exitcode()))
                    break
        busy = sum(len(process.jobs) for process in self.processes)
        while len(self.processes) < min(self.most, len(self.waiting) + busy):
            self.processes.append(_Process(self.memory_mb, self.timeout_s))

    def _turn(self) -> None:
        """Wait for an answer, a new file, or the nearest deadline, and act on what came."""
        deadlines = [process.deadline for process in self.processes]
        nearest = min(deadlines, default=float("inf"))
        wait_s = None if nearest == float("inf") else max(0.0, nearest - time.monotonic())
        conns = [process.conn for process in self.processes]
        answered = connection.wait([*conns, self._wake_read], wait_s)
        if self._wake_read in answered:
            os.read(self._wake_read, 4096)
        now = time.monotonic()
        for process in list(self.processes):
            if process.conn in answered:
                self._answer(process)
            elif (process.jobs or not process.ready) and now >= process.deadline:
                self._end(process, self._too_long(process))

    def _answer(self, process: _Process) -> None:
        try:
            what, value = process.conn.recv()
        except (EOFError, OSError):
            self._end(process, _died(process.exitcode()))
            return
        if what == "ready":
            process.ready = True
            process.deadline = float("inf")
            return
        job = process.took(self.timeout_s)
        container = job.container
        if what == "text":
            job.answered(container.text(value))
        elif what == "memory":
            job.answered(
                Unreadable(
                    container.path,
                    f"needs more than {self.memory_mb:,} MB to read: split it, or raise "
                    "SUMMARIZE_EXTRACT_MEMORY_MB",
                )
            )
            self._end(process, None)  # it ends itself after running out: start afresh
        else:
            job.answered(Unreadable(container.path, value))

    def _too_long(self, process: _Process) -> str:
        if not process.ready:
            return f"did not start within {START_TIMEOUT_S:g} s"
        return (
            f"took longer than {self.timeout_s:g} s to read: split it, or raise "
            "SUMMARIZE_EXTRACT_TIMEOUT_S"
        )

    def _end(self, process: _Process, reason: str | None) -> None:
        """Stop a process. The file it was reading fails with `reason` (None: it was reading
        none); those it had not begun wait for another."""
        process.process.kill()
        process.stop()
        self.processes.remove(process)
        if process.jobs and reason is not None:
            job = process.jobs.popleft()
            job.answered(Unreadable(job.container.path, reason))
        if process.jobs:
            self.waiting.extendleft(reversed(process.jobs))
        elif not process.ready:
            raise ExtractionUnavailable(
                "Text cannot be taken out of web pages, PDFs and Word files here: an "
                "extraction process ended before it was ready (exit status "
                f"{process.process.returncode}). Run `summarize doctor`, which says what is "
                "missing."
            )


def _done(item: Text | Unreadable | _Job) -> bool:
    return not isinstance(item, _Job) or item.done.is_set()


def _died(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"the process reading it was killed by {name}: it may be made to crash readers"
    return f"the process reading it ended (exit status {exitcode})"


def serve(fd: int, memory_mb: int, timeout_s: float) -> None:
    """An extraction process (`_Process` starts it): take a file at a time from the socket
    `fd`, answer with its text or why not. An end it did not choose is submit's to report.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for submit, which stops us
    warnings.simplefilter("ignore")
    try:
        _take_files(connection.Connection(fd), memory_mb, timeout_s)
    except BaseException:  # noqa: BLE001 - submit sees the end and fails the file
        os._exit(1)


def _take_files(conn: connection.Connection, memory_mb: int, timeout_s: float) -> None:
    problems = [problem for problem in formats.load().values() if problem]
    if problems:
        conn.close()  # submit reports that no process could start; doctor says which library
        return
    _limit_memory(memory_mb)
    conn.send(("ready", None))
    while True:
        try:
            kind, limit, max_bytes = conn.recv()
            fd = reduction.recv_handle(conn)
        except (EOFError, OSError):
            return
        _limit_time(timeout_s)  # should submit itself be gone, a file still ends
        try:
            raw = _read_from_start(fd, limit + 1)
            if len(raw) > limit:
                answer = ("reason", formats.too_large(None, limit, kind))
            else:
                answer = ("text", formats.text_of(kind, raw, max_bytes))
        except formats.NoText as exc:
            answer = ("reason", str(exc))
        except MemoryError:
            answer = ("memory", None)
        except OSError as exc:
            answer = ("reason", f"cannot be read ({exc.strerror or exc})")
        raw = None
        conn.send(answer)
        if answer[0] == "memory":
            return


def _read_from_start(fd: int, most: int) -> bytes:
    """Up to `most` bytes of the file from its start, whatever submit's offset in it (the
    descriptor is shared: a file handed on again after a process died is read whole)."""
    try:
        pieces, size = [], 0
        while size < most and (piece := os.pread(fd, min(most - size, 1 << 24), size)):
            pieces.append(piece)
            size += len(piece)
        return b"".join(pieces)
    finally:
        os.close(fd)


def _limit_time(timeout_s: float) -> None:
    """Allow this process twice the time limit of processor time for the next file: submit
    ends a file at its time limit; this ends one should submit have died meanwhile."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    wanted = spent + int(2 * timeout_s) + 1
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (wanted, hard))


def _limit_memory(memory_mb: int) -> None:
    """Allow this process `memory_mb` of address space beyond what it holds now."""
    try:
        with open("/proc/self/statm") as statm:
            now = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the time limit still holds
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    wanted = now + memory_mb * 1024 * 1024
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
