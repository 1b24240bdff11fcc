"""pdfs: --pdfs-count PDFs (the lee articles, numbered to be distinct) submitted with one
extraction process, with one a core, and with --baseline-tree's code, in turn (a, b, c,
c, b, a): each one's mean time and how much longer it takes than one a core."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from scripts.bench.common import ROOT, SUMMARIZE, latin, place, submit_measured


def run(args) -> dict:
    """The PDFs submitted by each way of reading them, in turn and back (a, b, c, c, b, a):
    one extraction process, one a core, and with --baseline-tree another checkout's submit
    (`git worktree add ../before <commit>`), which reads them however that commit did."""
    from tests.test_formats import pdf_bytes

    work = Path(tempfile.mkdtemp(prefix="summarize-pdfs-"))
    try:
        folder = work / "pdfs"
        folder.mkdir()
        articles = [p.read_text() for p in sorted(args.corpus.glob("*.txt"))]
        for i in range(args.pdfs_count):
            text = f"Document {i}. {articles[i % len(articles)]}"
            (folder / f"{i:05d}.pdf").write_bytes(pdf_bytes([latin(text)]))
        cores = len(os.sched_getaffinity(0))
        ways = {"1 process": ({"SUMMARIZE_EXTRACT_PROCESSES": "1"}, ROOT)}
        ways[f"{cores} processes"] = ({"SUMMARIZE_EXTRACT_PROCESSES": str(cores)}, ROOT)
        if args.baseline_tree:  # run from its folder: `python -m` looks there first
            tree = args.baseline_tree.resolve()
            ways["baseline"] = ({"PYTHONPATH": str(tree)}, tree)
        took: dict[str, list[float]] = {way: [] for way in ways}
        for way in [*ways, *reversed(ways)]:
            extra, tree = ways[way]
            env = place(work / f"run-{sum(map(len, took.values()))}", "pdfs") | extra
            subprocess.run(
                [*SUMMARIZE, "db", "upgrade"], env=env, cwd=tree, check=True, capture_output=True
            )
            took[way].append(submit_measured(folder, env, work / "submit.log", cwd=tree)["seconds"])
            print(f"  pdfs: {way}: {took[way][-1]:.1f} s", flush=True)
        return {
            "mode": "pdfs",
            "docs": args.pdfs_count,
            "mean_s": {way: sum(times) / len(times) for way, times in took.items()},
            "parallel": f"{cores} processes",
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(result: dict) -> None:
    means, parallel = result["mean_s"], result["parallel"]
    ratios = ", ".join(
        f"{way}/{parallel} {seconds / means[parallel]:.2f}x"
        for way, seconds in means.items()
        if way != parallel
    )
    times = ", ".join(f"{way} {seconds:.1f} s" for way, seconds in means.items())
    print(f"pdfs      {result['docs']:,} PDFs submitted: {times}; {ratios}")
