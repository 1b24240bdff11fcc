"""The benchmark's runner: its options, each mode's module, and the report's ratio line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from scripts.bench.common import DEFAULT_CORPUS, documents

# Each mode's module has run(args) -> dict and, unless its result is a rate, report(result).
MODES = {
    "raw": "raw",
    "pipeline": "pipeline",
    "hf": "hf",
    "submit": "submit",
    "ceiling": "ceiling",
    "endtoend": "endtoend",
    "startup": "startup",
    "quality": "quality",
    "long": "long",
    "hostile": "hostile",
    "pdfs": "pdfs",
    "readers": "readers",
    "peer": "peer",
    "parquet": "parquet",
    "s3": "objects",
    "schema": "schema",
    "api": "api",
}
IN_A_CHILD = {"raw", "hf"}  # an engine of their own, in a process of their own
CHILDREN = {
    "raw": ("raw", "run"),
    "hf": ("hf", "run"),
    "quality-raw": ("quality", "run_quality_raw"),
}
BENCH = Path(__file__).resolve().parent


def child(mode: str, args: argparse.Namespace) -> dict:
    """Run one engine mode in a fresh process, so no two engines share the machine."""
    command = [sys.executable, str(BENCH), "--_child", mode, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-5000:])
        raise SystemExit(f"{mode} failed (exit {done.returncode})")
    return json.loads(lines[-1])


def _module(mode: str):
    return importlib.import_module(f"scripts.bench.{MODES[mode]}")


def main() -> None:
    import scripts.bench

    parser = argparse.ArgumentParser(
        description=scripts.bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--modes", default="raw,pipeline,hf,submit")
    parser.add_argument("--docs", type=int, default=None, help="use only the first N documents")
    parser.add_argument(
        "--hf-docs",
        type=int,
        default=None,
        help="hf only: the first N documents (hf is slow); rates stay comparable",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="summary length (default: the profile's)"
    )
    parser.add_argument(
        "--hf-batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 32]
    )
    parser.add_argument("--submit-files", type=int, default=100_000)
    parser.add_argument("--ceiling-docs", type=int, default=100_000)
    parser.add_argument(
        "--empty-database",
        action="store_true",
        help="ceiling: drop everything in SUMMARIZE_DATABASE_URL first",
    )
    parser.add_argument(
        "--embedded-submit",
        action="store_true",
        help="submit mode: use the embedded Redis even if SUMMARIZE_BROKER_URL is set",
    )
    parser.add_argument("--endtoend-docs", type=int, default=1_000_000)
    parser.add_argument("--readers-rows", type=int, default=5_000_000)
    parser.add_argument(
        "--readers-base",
        type=int,
        default=100_000,
        help="readers: distinct documents; the rest of the rows repeat them",
    )
    parser.add_argument(
        "--readers-dir",
        type=Path,
        default=None,
        help="readers: keep the data here (and reuse it on the next run)",
    )
    parser.add_argument("--long-papers", type=int, default=20, help="long: how many papers")
    parser.add_argument(
        "--peer-rounds", type=int, default=2, help="peer: run-batch and summarize run, each N times"
    )
    parser.add_argument(
        "--peer-paragraphs",
        type=int,
        default=None,
        help="peer: N paragraphs of aclsum's papers instead of the corpus's documents",
    )
    parser.add_argument(
        "--parquet-rows", type=int, default=1_000_000, help="parquet: how many records"
    )
    parser.add_argument("--pdfs-count", type=int, default=2000, help="pdfs: how many PDFs")
    parser.add_argument("--s3-objects", type=int, default=20_000, help="s3: how many objects")
    parser.add_argument("--s3-rounds", type=int, default=2, help="s3: submits of each, in turn")
    parser.add_argument(
        "--schema", help="schema: the JSON schema (samples/schemas/key-points.json)"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="pdfs: also time the submit of this checkout (another commit's worktree)",
    )
    parser.add_argument(
        "--api-requests", type=int, default=100_000, help="api: requests uploaded (and a tenth)"
    )
    parser.add_argument(
        "--api-round-trip", type=int, default=20_000, help="api: requests of the round trip"
    )
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_tokens is None:
        from core.settings import Settings

        args.max_tokens = Settings.from_env().summary_max_tokens
    os.environ["SUMMARIZE_MAX_TOKENS"] = str(args.max_tokens)
    if args._child:
        module, function = CHILDREN[args._child]
        run = getattr(importlib.import_module(f"scripts.bench.{module}"), function)
        print(json.dumps(run(args)), flush=True)
        return

    modes = args.modes.split(",")
    print(
        f"corpus {args.corpus} ({len(documents(args.corpus, args.docs))} documents), "
        f"max_tokens {args.max_tokens}, profile {os.environ.get('SUMMARIZE_PROFILE', 'throughput')}",
        flush=True,
    )
    runs: dict[str, list[dict]] = {}
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
        result = child(mode, args) if mode in IN_A_CHILD else _module(mode).run(args)
        report(result)
        runs.setdefault(mode, []).append(result)
    line = ratios(runs)
    if line:
        print(line)


def ratios(runs: dict[str, list[dict]]) -> str:
    """The ratios of the modes' rates; a mode run more than once counts all its documents over
    all its seconds (`--modes raw,pipeline,pipeline,raw` cancels the machine's drift)."""
    timed = {m: r for m, r in runs.items() if "seconds" in r[0]}
    rates = {
        m: sum(r["docs"] for r in rs) / sum(r["seconds"] for r in rs) for m, rs in timed.items()
    }
    made = [
        f"{a}/{b}={rates[a] / rates[b]:.2f}"
        for a, b in (("pipeline", "raw"), ("raw", "hf"), ("pipeline", "hf"))
        if a in rates and b in rates
    ]
    repeated = {m: len(rs) for m, rs in timed.items() if len(rs) > 1}
    if made and repeated:
        made.append("(" + ", ".join(f"{n} runs of {m}" for m, n in repeated.items()) + ")")
    return " ".join(made)


def report(result: dict) -> None:
    """A mode's own report, or documents and output tokens a second."""
    own = getattr(_module(result["mode"]), "report", None)
    if own is not None:
        own(result)
        return
    docs_s = result["docs"] / result["seconds"]
    tokens_s = result["output_tokens"] / result["seconds"]
    notes = [result["note"]] if result.get("note") else []
    if result.get("again"):
        notes.append(f"{result['again']} looped and generated again")
    if "stopped" in result:
        notes.append(f"{result['stopped']} ended by stop, {result['looped']} still loop")
    note = f"  ({'; '.join(notes)})" if notes else ""
    print(
        f"{result['mode']:<9} {result['docs']:>7,} docs  {result['seconds']:>8.1f} s  "
        f"{docs_s:>7.2f} docs/s  {tokens_s:>8.1f} output tokens/s{note}",
        flush=True,
    )
