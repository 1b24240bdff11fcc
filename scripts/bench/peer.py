"""peer: vLLM's own batch runner and `summarize run` on the same OpenAI batch input file.

`python -m vllm.entrypoints.openai.run_batch` is given the worker's engine settings (the
profile's three knobs, its batched tokens, the dtype, eager mode, prefix caching and the
CPU build's block size); each request's messages are the instruction (system) and the
document (user), so both send the model the same tokens. `summarize run` goes with no
sentence limit, as run-batch has none, and a fresh data folder each time (a new SQLite file
and embedded Redis: a first run). Each is timed from start to exit, in turn, `--peer-rounds`
times; the phases come from when run-batch's log lines show (the file read every 50 ms) and
from summarize's rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.common import SUMMARIZE, documents

# run-batch's log lines that open and close its phases: its engine is ready; it writes outputs
READY, WRITING = "Supported tasks", "Writing outputs"
POLL_S = 0.05


def run(args) -> dict:
    from core.model import resolve
    from core.settings import Settings
    from worker.engine import CPU_BLOCK_TOKENS, engine_dtype, is_cpu_build

    settings = Settings.from_env()
    model = resolve(settings)
    work = Path(tempfile.mkdtemp(prefix="summarize-peer-"))
    texts = (
        paragraphs(args.peer_paragraphs)
        if args.peer_paragraphs
        else documents(args.corpus, args.docs)
    )
    batch_file = work / "input.jsonl"
    with batch_file.open("w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps(_request(i, model, settings.instruction, text, args.max_tokens)))
            out.write("\n")
    profile = settings.profile
    runner = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.run_batch",
        *("-i", str(batch_file), "-o", str(work / "output.jsonl"), "--model", str(model)),
        *("--max-num-seqs", str(profile.max_num_seqs)),
        *("--max-model-len", str(profile.max_model_len)),
        *("--max-num-batched-tokens", str(profile.max_num_batched_tokens)),
        *("--gpu-memory-utilization", str(profile.cpu_memory_utilization)),
        *("--dtype", engine_dtype(settings.dtype, is_cpu_build())),
        *("--enforce-eager", "--enable-prefix-caching", "--seed", "0"),
        *(("--block-size", str(CPU_BLOCK_TOKENS)) if is_cpu_build() else ()),
    ]
    env = os.environ | {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    rounds = []
    for n in range(args.peer_rounds):
        rounds.append({"peer": _run_batch(runner, env, work), "ours": _ours(batch_file, work, n)})
    source = "aclsum paragraphs" if args.peer_paragraphs else "documents"
    return {"mode": "peer", "docs": len(texts), "source": source, "rounds": rounds}


def paragraphs(count: int) -> list[str]:
    """The first `count` distinct paragraphs of 50 words or more of aclsum's train and
    validation papers (their full text as parsed): many documents of real text, so that the
    engine, not start-up, takes the time."""
    from aclsum import ACLSum

    found: dict[str, None] = {}
    for split in ("train", "val"):
        for doc in ACLSum(split).documents:
            for paragraph in doc.get_fulltext_parse()["pdf_parse"]["body_text"]:
                if len(paragraph["text"].split()) >= 50:
                    found[paragraph["text"]] = None
                    if len(found) == count:
                        return list(found)
    raise SystemExit(f"aclsum holds only {len(found)} such paragraphs, not {count}")


def _request(i: int, model: Path, instruction: str, text: str, max_tokens: int) -> dict:
    return {
        "custom_id": f"doc-{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": str(model),
            "messages": [
                {"role": "system", "content": instruction},
                {"role": "user", "content": text},
            ],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    }


def _timed(
    command: list[str], env: dict, log: Path, marks: tuple[str, ...] = ()
) -> tuple[float, float, str, dict[str, float]]:
    """Start and exit times of a command whose output goes to a file, as a shell's `time`
    sees it (a pipe would also wait for any child process still holding it), its log, and
    when each of `marks` first showed in the log: the file is read every POLL_S while the
    command runs (vLLM's own log times have whole seconds, too coarse for a 14 s phase)."""
    seen: dict[str, float] = {}
    with log.open("w") as out:
        started = time.time()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            if marks and len(seen) < len(marks):
                text = log.read_text(errors="replace")
                now = time.time()
                seen.update({m: now for m in marks if m not in seen and m in text})
            time.sleep(POLL_S)
        ended = time.time()
    text = log.read_text(errors="replace")
    if process.returncode != 0:
        raise SystemExit(f"{command[2]} failed (exit {process.returncode}):\n{text[-3000:]}")
    return started, ended, text, seen


def _run_batch(command: list[str], env: dict, work: Path) -> dict:
    started, ended, _, seen = _timed(command, env, work / "run-batch.log", (READY, WRITING))
    tokens = stopped = 0
    for line in (work / "output.jsonl").read_text().splitlines():
        body = json.loads(line)["response"]["body"]
        tokens += body["usage"]["completion_tokens"]
        stopped += body["choices"][0]["finish_reason"] == "stop"
    ready, written = seen.get(READY), seen.get(WRITING)
    return {
        "seconds": ended - started,
        "output_tokens": tokens,
        "stopped": stopped,
        "start_s": ready - started if ready else None,
        "generate_s": written - ready if ready and written else None,
        "exit_s": ended - written if written else None,
    }


def _ours(batch_file: Path, work: Path, n: int) -> dict:
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results
    from readers.views import as_utc

    env = os.environ | {"SUMMARIZE_DATA_DIR": str(work / f"data-{n}")}
    env.pop("SUMMARIZE_DATABASE_URL", None)
    env.pop("SUMMARIZE_BROKER_URL", None)  # the embedded defaults, as a new user has them
    command = [*SUMMARIZE, "run", str(batch_file), "--batch", "peer", "--max-sentences", "0"]
    started, ended, _, _ = _timed(command, env, work / f"run-{n}.log")
    db = database.connect(Settings.from_env(env))
    with db.connect() as conn:
        row = conn.execute(
            sa.select(
                sa.func.sum(results.c.completion_tokens),
                sa.func.sum(sa.case((results.c.finish_reason == "stop", 1), else_=0)),
                sa.func.min(results.c.started_at),
                sa.func.max(results.c.finished_at),
            ).where(results.c.batch == "peer")
        ).one()
    db.dispose()
    first, last = as_utc(row[2]).timestamp(), as_utc(row[3]).timestamp()
    return {
        "seconds": ended - started,
        "output_tokens": row[0],
        "stopped": row[1],
        "start_s": first - started,
        "generate_s": last - first,
        "exit_s": ended - last,
    }


def report(result: dict) -> None:
    def phase(value: float | None) -> str:
        return f"{value:6.1f}" if value is not None else "     ?"

    print(
        f"peer: {result['docs']} {result.get('source', 'documents')}, start to exit; "
        "phases: start, generate, exit (s)"
    )
    for n, pair in enumerate(result["rounds"], 1):
        for name, label in (("peer", "run-batch"), ("ours", "summarize run")):
            r = pair[name]
            print(
                f"  round {n} {label:<14} {r['seconds']:7.1f} s  {phase(r['start_s'])} "
                f"{phase(r['generate_s'])} {phase(r['exit_s'])}  {r['output_tokens']:>6,} "
                f"output tokens, {r['stopped']} ended by stop, "
                f"{result['docs'] / r['seconds']:.2f} documents/s"
            )
    peer = sum(p["peer"]["seconds"] for p in result["rounds"])
    ours = sum(p["ours"]["seconds"] for p in result["rounds"])
    print(
        f"summarize run / run-batch, wall (all rounds) = {ours / peer:.2f}; "
        f"documents per second = {peer / ours:.2f}"
    )
