"""Benchmark modes for reading corpora: `scripts/bench.py --modes hostile,pdfs` runs them.

hostile  the files of tests/hostile.py (bombs, malformed and deep files) beside the lee
         articles and a good page, PDF and Word file, through a real `summarize submit`:
         its wall time and the peak memory of it and its extraction processes together
         (sampled every 20 ms), and whether each file got the row it should
pdfs     --pdfs-count PDFs (the lee articles, numbered to be distinct) submitted with one
         extraction process and with one a core, in turn: documents a second of each and
         the ratio
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARIZE = [sys.executable, "-m", "summarize.cli"]


def run_hostile(args) -> dict:
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results
    from tests import hostile
    from tests.documents import PAGE, docx_bytes, pdf_bytes

    work = Path(tempfile.mkdtemp(prefix="summarize-hostile-"))
    try:
        folder = work / "night"
        hostile.build(folder)
        good = sorted(args.corpus.glob("*.txt"))
        for article in good:
            shutil.copy(article, folder / article.name)
        (folder / "report.pdf").write_bytes(pdf_bytes(["The dam holds more water."], "Dam"))
        (folder / "q3.docx").write_bytes(docx_bytes())
        (folder / "bridge.html").write_text(PAGE)
        env = _place(work, "hostile")
        subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
        took = _submit(folder, env, work / "submit.log")
        with database.connect(Settings.from_env(env)).connect() as conn:
            rows = conn.execute(sa.select(results.c.source_path, results.c.status)).all()
        statuses = {os.path.basename(path): status for path, status in rows}
        failed = {name for name, status in statuses.items() if status == "failed"}
        expected = {"nested.jsonl:1", "nested.jsonl:2", "unclosed.csv:2"} | (
            set(hostile.HOSTILE) - {"nested.jsonl", "unclosed.csv"}
        )
        return {
            "mode": "hostile",
            "files": len(hostile.HOSTILE) + len(hostile.HEAVY),
            "good": len(good) + 3,
            "submit_s": took["seconds"],
            "peak_tree_mb": took["peak_tree_mb"],
            "failed": len(failed),
            "queued": sum(status == "queued" for status in statuses.values()),
            "as_expected": failed == expected,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_pdfs(args) -> dict:
    """The PDFs submitted by each way of reading them, in turn and back (a, b, c, c, b, a):
    one extraction process, one a core, and with --baseline-tree another checkout's submit
    (`git worktree add ../before <commit>`), which reads them however that commit did."""
    from tests.documents import pdf_bytes

    work = Path(tempfile.mkdtemp(prefix="summarize-pdfs-"))
    try:
        folder = work / "pdfs"
        folder.mkdir()
        articles = [p.read_text() for p in sorted(args.corpus.glob("*.txt"))]
        for i in range(args.pdfs_count):
            text = f"Document {i}. {articles[i % len(articles)]}"
            (folder / f"{i:05d}.pdf").write_bytes(pdf_bytes([_latin(text)]))
        cores = len(os.sched_getaffinity(0))
        ways = {"1 process": ({"SUMMARIZE_EXTRACT_PROCESSES": "1"}, ROOT)}
        ways[f"{cores} processes"] = ({"SUMMARIZE_EXTRACT_PROCESSES": str(cores)}, ROOT)
        if args.baseline_tree:  # run from its folder: `python -m` looks there first
            tree = args.baseline_tree.resolve()
            ways["baseline"] = ({"PYTHONPATH": str(tree)}, tree)
        took: dict[str, list[float]] = {way: [] for way in ways}
        for way in [*ways, *reversed(ways)]:
            extra, tree = ways[way]
            env = _place(work / f"run-{sum(map(len, took.values()))}", "pdfs") | extra
            subprocess.run(
                [*SUMMARIZE, "db", "upgrade"], env=env, cwd=tree, check=True, capture_output=True
            )
            took[way].append(_submit(folder, env, work / "submit.log", cwd=tree)["seconds"])
            print(f"  pdfs: {way}: {took[way][-1]:.1f} s", flush=True)
        return {
            "mode": "pdfs",
            "docs": args.pdfs_count,
            "mean_s": {way: sum(times) / len(times) for way, times in took.items()},
            "parallel": f"{cores} processes",
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _latin(text: str) -> str:
    """Text fpdf2's core fonts can draw."""
    return text.encode("latin-1", "replace").decode("latin-1")


def _place(work: Path, name: str) -> dict:
    return os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{name}-{os.getpid()}",
    }


def _submit(folder: Path, env: dict, log: Path, cwd: Path = ROOT) -> dict:
    """`summarize submit` of the folder: wall seconds, and the peak of its memory with its
    extraction processes' (resident set sizes summed, sampled every 20 ms)."""
    import psutil

    started = time.perf_counter()
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [*SUMMARIZE, "submit", str(folder), "--batch", "bench"],
            env=env,
            cwd=cwd,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        peak = [0]
        sampler = threading.Thread(target=_sample, args=(psutil.Process(process.pid), peak))
        sampler.start()
        status = process.wait()
        sampler.join()
    seconds = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"submit failed:\n{log.read_text()[-3000:]}")
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


def report(result: dict) -> bool:
    """Print a result of these modes; False for a result of another."""
    if result["mode"] == "hostile":
        print(
            f"hostile   {result['files']} hostile and heavy files beside {result['good']} good "
            f"ones: submit {result['submit_s']:.1f} s, peak {result['peak_tree_mb']:.0f} MB with "
            f"its extraction processes; {result['failed']} failed, {result['queued']} queued, "
            f"{'each as expected' if result['as_expected'] else 'NOT AS EXPECTED'}"
        )
        return True
    if result["mode"] == "pdfs":
        means, parallel = result["mean_s"], result["parallel"]
        ratios = ", ".join(
            f"{way}/{parallel} {seconds / means[parallel]:.2f}x"
            for way, seconds in means.items()
            if way != parallel
        )
        times = ", ".join(f"{way} {seconds:.1f} s" for way, seconds in means.items())
        print(f"pdfs      {result['docs']:,} PDFs submitted: {times}; {ratios}")
        return True
    return False
