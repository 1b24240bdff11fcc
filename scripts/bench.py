#!/usr/bin/env python
"""Throughput benchmark: summarize's pipeline against vLLM by hand and a Hugging Face loop.

    python scripts/bench.py                       # all modes on ../shared/corpus/lee-background
    python scripts/bench.py --modes raw,pipeline  # just these
    python scripts/bench.py --modes raw,pipeline,pipeline,raw  # in turn: ratios over all runs
    python scripts/bench.py --corpus DIR --max-tokens 64 --docs 96

Modes, each on the same documents, model, profile and greedy sampling, one after another:
  raw       one LLM.generate call over every document at once (the ceiling), then one over
            the summaries that loop, with the settings that break loops: the same summaries
            the pipeline writes
  pipeline  the real path: `summarize submit` into Redis, a running `summarize worker`,
            rows in the database; timed from the first submit to the last row committed,
            with the model already loaded and warmed up on other documents
  hf        transformers `generate` in static batches, at the best of a few batch sizes
  submit    `summarize submit` alone on 100,000 small generated files: documents per
            second into Redis and the database, and its peak memory (also on 10,000 files,
            to show memory does not grow with the corpus)
  ceiling   the pipeline with the model taken out (SUMMARIZE_MODEL=echo, the instant engine):
            100,000 generated documents of 150 words (and 10,000) submitted, then drained by
            a real `summarize worker --burst`; Redis memory per queued document (INFO memory
            before and after submit), submit's rate, the worker's rate (first start to last
            row, from batch_stats) and its peak memory. SUMMARIZE_DATABASE_URL picks the
            database (default: SQLite in a temporary folder; a PostgreSQL database is
            emptied first, so it asks for --empty-database); the database's size per
            document (SUMMARIZE_KEEP_TEXTS=1 to keep texts). SUMMARIZE_IN_FLIGHT sets the
            worker's window as it does for users
  endtoend  one batch of 1,000,000 generated documents (--endtoend-docs) through every step
            a user runs, with the instant engine: `submit`, `worker --burst`, `status`,
            `results --format jsonl`; each step's wall time and peak memory
  startup   `summarize --help` in a fresh process: what every producer command pays first
  quality   the default model on the ACL papers of `aclsum` (train and validation splits:
            abstract, introduction and conclusion; the papers that fit one prompt), against
            their human summaries (challenge, approach, outcome): vLLM by hand with greedy
            decoding alone, with the summaries that loop generated again, and with the
            sentence limit as well (SUMMARIZE_MAX_SENTENCES), then the real pipeline
            (`submit --wait`, a running worker) scored by `summarize eval --json`; ROUGE of
            each beside the lead
            baseline, and the shares that loop, are cut at the length cap, and give a
            number the paper does not
  long      whole papers of aclsum's train split (--long-papers, 20), written as Markdown
            (title, abstract, section headings, paragraphs: many times the context), through
            the pipeline (parts and the combining pass) and `summarize eval`: how many end by
            `stop`, how many still loop, ROUGE beside the lead baseline
  hostile   files made to hurt a reader beside good ones, through `summarize submit`: its
            time and peak memory with its extraction processes (scripts/bench_inputs.py)
  pdfs      --pdfs-count PDFs submitted with one extraction process, with one a core, and
            with --baseline-tree's code (an earlier commit's worktree), in turn
  readers   the dashboards, `summarize status`/`batches` and each Grafana panel's query,
            median milliseconds over 5,000,000 rows of `results` (--readers-rows), made by
            submitting 100,000 generated documents, draining them with the instant engine,
            and submitting them again under other batch names (deduplicated at submit)

It prints documents and output tokens per second for each mode, then one line of ratios:
`pipeline/raw=… raw/hf=… pipeline/hf=…`. A mode named more than once runs that often, and its
ratios count all its documents over all its seconds: one pair drifts with the machine (the
README's pairs), runs in turn less so. Settings (SUMMARIZE_PROFILE, SUMMARIZE_MODEL, …) are
read from the environment as the worker reads them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpus" / "lee-background"
SAMPLES = ROOT / "samples"  # warm-up documents, distinct from the measured ones

from scripts import bench_inputs  # noqa: E402 - ROOT is on the path now


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


def child(mode: str, args: argparse.Namespace) -> dict:
    """Run one engine mode in a fresh process, so no two engines share the machine."""
    command = [sys.executable, __file__, "--_child", mode, *sys.argv[1:]]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-5000:])
        raise SystemExit(f"{mode} failed (exit {done.returncode})")
    return json.loads(lines[-1])


# -- raw: vLLM by hand -----------------------------------------------------------------------


def run_raw(args) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from core.model import resolve
    from core.prompt import sampling
    from core.quality import loops
    from core.settings import Settings
    from worker.engine import VllmEngine

    settings = Settings.from_env()
    engine = VllmEngine(
        resolve(settings), settings.profile, settings.model_name, dtype=settings.dtype
    )
    limit = engine.max_model_len - args.max_tokens
    prompts = [
        engine.prompt_ids(settings.instruction, d) for d in documents(args.corpus, args.docs)
    ]
    if any(len(p) > limit for p in prompts):
        raise SystemExit(
            "raw mode needs documents that fit the context: raise SUMMARIZE_MAX_MODEL_LEN"
        )
    params = SamplingParams(
        **sampling(args.max_tokens, max_sentences=settings.sentences_for(settings.instruction))
    )
    warm = [engine.prompt_ids(settings.instruction, d) for d in documents(SAMPLES, None)]
    engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in warm], params, use_tqdm=False)
    started = time.perf_counter()
    outputs = engine.llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
    )
    # The same summaries as the pipeline's: those that loop, generated again (worker/parts.py)
    looped = [p for p, o in zip(prompts, outputs, strict=True) if loops(o.outputs[0].text)]
    again = []
    if looped:
        again = engine.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in looped],
            SamplingParams(
                **sampling(
                    args.max_tokens,
                    loop_breaking=True,
                    max_sentences=settings.sentences_for(settings.instruction),
                )
            ),
            use_tqdm=False,
        )
    seconds = time.perf_counter() - started
    engine.close()
    tokens = sum(len(o.outputs[0].token_ids) for o in [*outputs, *again])
    return {
        "mode": "raw",
        "docs": len(outputs),
        "seconds": seconds,
        "output_tokens": tokens,
        "again": len(again),
    }


# -- pipeline: the real thing ----------------------------------------------------------------


def run_pipeline(args) -> dict:
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results
    from readers.views import as_utc

    work = Path(tempfile.mkdtemp(prefix="summarize-bench-"))
    # SUMMARIZE_MAX_TOKENS is in os.environ already; with no SUMMARIZE_DATABASE_URL the
    # database is a SQLite file in this data folder.
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{os.getpid()}",
    }
    if "SUMMARIZE_MODEL" not in os.environ:
        env["SUMMARIZE_MODEL"] = str(Settings.from_env().default_model_dir)
    corpus = work / "corpus"
    corpus.mkdir()
    for i, text in enumerate(documents(args.corpus, args.docs)):
        (corpus / f"{i:06d}.txt").write_text(text, encoding="utf-8")
    with running_worker(env, work):
        subprocess.run(
            [
                *SUMMARIZE,
                "submit",
                str(SAMPLES),
                "--batch",
                "warm-up",
                "--wait",
                "--timeout",
                "900",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        started = time.time()
        done = subprocess.run(
            [*SUMMARIZE, "submit", str(corpus), "--batch", "bench", "--wait", "--timeout", "7200"],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:  # --wait exits non-zero unless every document succeeded
            raise SystemExit(f"the bench batch did not all succeed:\n{done.stderr[-3000:]}")
        db = database.connect(Settings.from_env(env))
        with db.connect() as conn:
            row = conn.execute(
                sa.select(
                    sa.func.count(),
                    sa.func.sum(results.c.completion_tokens),
                    sa.func.max(results.c.finished_at),
                    sa.func.sum(sa.case((results.c.finish_reason == "stop", 1), else_=0)),
                    sa.func.sum(sa.case((results.c.looped, 1), else_=0)),
                ).where(results.c.batch == "bench")
            ).one()
        db.dispose()
        seconds = as_utc(row[2]).timestamp() - started  # SQLite keeps no time zone; we write UTC
        return {
            "mode": "pipeline",
            "docs": row[0],
            "seconds": seconds,
            "output_tokens": int(row[1]),
            "stopped": int(row[3]),
            "looped": int(row[4]),
        }


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


# -- quality: summaries against references people wrote ------------------------------------


def papers() -> list[dict]:
    """aclsum's train and validation papers: {name, text, reference}."""
    import aclsum

    folder = Path(aclsum.__file__).parent / "dataset"
    found = []
    for split in ("train", "val"):
        for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            paper = json.loads(line)
            sections = paper["sentences"]
            text = "\n\n".join(
                _detokenized(" ".join(sections[s]))
                for s in ("abstract", "introduction", "conclusion")
            )
            summary = paper["summary"]
            reference = " ".join(summary[k] for k in ("challenge", "approach", "outcome"))
            found.append({"name": f"{paper['id']}.txt", "text": text, "reference": reference})
    return found


def _detokenized(text: str) -> str:
    """aclsum's sentences are tokenized ("answers ( QA ) ."): the spaces taken out again."""
    for spaced, plain in (
        (" .", "."),
        (" ,", ","),
        (" ;", ";"),
        (" :", ":"),
        ("( ", "("),
        (" )", ")"),
        (" %", "%"),
        (" 's", "'s"),
        (" n't", "n't"),
        (" ?", "?"),
    ):
        text = text.replace(spaced, plain)
    return text


def run_quality_raw(args) -> dict:
    """vLLM by hand on the papers: greedy alone; with the looping ones generated again; and
    with the sentence limit too (what the pipeline does)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from core.model import resolve
    from core.prompt import sampling
    from core.quality import loops
    from core.settings import Settings
    from worker.engine import VllmEngine

    settings = Settings.from_env()
    engine = VllmEngine(
        resolve(settings), settings.profile, settings.model_name, dtype=settings.dtype
    )
    limit = engine.max_model_len - args.max_tokens  # the papers that fit one request
    found, prompts = [], []
    for paper in papers():
        prompt = engine.prompt_ids(settings.instruction, paper["text"])
        if len(prompt) <= limit:
            found.append(paper)
            prompts.append(TokensPrompt(prompt_token_ids=prompt))

    def decoded(sentences: int | None, again: bool) -> list[tuple[str, str]]:
        """Each paper's summary and finish reason: greedy, then (again) loops generated again."""
        first = engine.llm.generate(
            prompts,
            SamplingParams(**sampling(args.max_tokens, max_sentences=sentences)),
            use_tqdm=False,
        )
        answers = [(o.outputs[0].text, o.outputs[0].finish_reason) for o in first]
        looping = [i for i, (text, _) in enumerate(answers) if again and loops(text)]
        if looping:
            second = engine.llm.generate(
                [prompts[i] for i in looping],
                SamplingParams(
                    **sampling(args.max_tokens, loop_breaking=True, max_sentences=sentences)
                ),
                use_tqdm=False,
            )
            for i, o in zip(looping, second, strict=True):
                answers[i] = (o.outputs[0].text, o.outputs[0].finish_reason)
        return answers

    stages = {
        "greedy": decoded(None, again=False),
        "again": decoded(None, again=True),
        "limited": decoded(settings.max_sentences, again=True),
    }
    engine.close()
    return {"mode": "quality-raw", "names": [p["name"] for p in found], **stages}


def run_quality(args) -> dict:
    from core.quality import loops, novel_numbers
    from readers.evaluation import score

    by_name = {p["name"]: p for p in papers()}
    raw = child("quality-raw", args)
    names = raw["names"]
    measured = {}
    for stage in ("greedy", "again", "limited"):
        outputs = raw[stage]
        items = [
            ((by_name[n]["reference"],), text, by_name[n]["text"])
            for n, (text, _) in zip(names, outputs, strict=True)
        ]
        summaries, lead, lead_words = score(items)
        measured[stage] = {
            "summaries": summaries,
            "lead": lead,
            "lead_words": lead_words,
            "looped": sum(loops(text) for text, _ in outputs) / len(outputs),
            "truncated": sum(reason == "length" for _, reason in outputs) / len(outputs),
            "novel": sum(
                bool(novel_numbers(text, by_name[n]["text"]))
                for n, (text, _) in zip(names, outputs, strict=True)
            )
            / len(outputs),
        }
    measured["pipeline"] = _quality_pipeline(args, [by_name[n] for n in names])
    return {"mode": "quality", "docs": len(names), "papers": len(by_name), **measured}


def _quality_pipeline(args, chosen: list[dict]) -> dict:
    """The papers through `submit --wait` and a running worker, scored by `summarize eval`."""
    import sqlalchemy as sa

    from core import database
    from core.settings import Settings
    from core.tables import results

    work = Path(tempfile.mkdtemp(prefix="summarize-quality-"))
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_QUEUE": f"bench-{os.getpid()}",
        "SUMMARIZE_MODEL": os.environ.get(
            "SUMMARIZE_MODEL", str(Settings.from_env().default_model_dir)
        ),
    }
    corpus = work / "corpus"
    corpus.mkdir()
    references = work / "references.jsonl"
    with references.open("w", encoding="utf-8") as out:
        for paper in chosen:
            (corpus / paper["name"]).write_text(paper["text"], encoding="utf-8")
            out.write(
                json.dumps({"source_path": paper["name"], "reference": paper["reference"]}) + "\n"
            )
    with running_worker(env, work):
        subprocess.run(
            [*SUMMARIZE, "submit", str(corpus), "--batch", "aclsum", "--wait", "--timeout", "7200"],
            env=env,
            check=True,
            capture_output=True,
        )
        done = subprocess.run(
            [*SUMMARIZE, "eval", "aclsum", "--references", str(references), "--json"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        found = json.loads(done.stdout)
        db = database.connect(Settings.from_env(env))
        with db.connect() as conn:
            rows = conn.execute(
                sa.select(
                    results.c.novel_numbers,
                    results.c.finish_reason,
                    results.c.looped,
                    results.c.parts,
                ).where(results.c.batch == "aclsum")
            ).all()
        db.dispose()
        found["novel"] = sum(r.novel_numbers > 0 for r in rows) / len(rows)
        found["stopped"] = sum(r.finish_reason == "stop" for r in rows)
        found["still_looped"] = sum(bool(r.looped) for r in rows)
        found["parts"] = sum(r.parts for r in rows) / len(rows)
        return found


def run_long(args) -> dict:
    """Whole papers, many times the context, through the pipeline (parts and combining)."""
    from aclsum import ACLSum

    chosen = []
    for doc in ACLSum("train").documents[: args.long_papers]:
        paper = doc.get_fulltext_parse()
        lines = [f"# {paper['title']}", "", paper.get("abstract") or ""]
        section = None
        for paragraph in paper["pdf_parse"]["body_text"]:
            if paragraph.get("section") and paragraph["section"] != section:
                section = paragraph["section"]
                lines += ["", f"## {section}"]
            lines += ["", paragraph["text"]]
        reference = " ".join(doc.summaries[k] for k in ("challenge", "approach", "outcome"))
        chosen.append({"name": f"{doc.id}.md", "text": "\n".join(lines), "reference": reference})
    found = _quality_pipeline(args, chosen)
    words = sum(len(p["text"].split()) for p in chosen) / len(chosen)
    return {"mode": "long", "docs": len(chosen), "words": words, **found}


# -- hf: a Hugging Face transformers loop ----------------------------------------------------


def run_hf(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from core.model import resolve
    from core.settings import Settings
    from worker.engine import chat_prompt_ids, engine_dtype

    settings = Settings.from_env()
    model_path = resolve(settings)
    # The dtypes the worker would run in (SUMMARIZE_DTYPE; "auto": bfloat16 and float32 both
    # tried, float32 alone on a CPU that emulates bfloat16, as worker/engine.py decides).
    runs_in = engine_dtype(settings.dtype, cpu=not torch.cuda.is_available())
    dtypes = (torch.bfloat16, torch.float32) if runs_in == "auto" else (getattr(torch, runs_in),)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    def prompt(text: str) -> list[int]:
        return chat_prompt_ids(tokenizer, settings.instruction, text)

    def generate(model, prompts: list[list[int]], batch: int) -> int:
        produced = 0
        for start in range(0, len(prompts), batch):
            chunk = prompts[start : start + batch]
            padded = tokenizer.pad({"input_ids": chunk}, return_tensors="pt")
            with torch.inference_mode():
                out = model.generate(
                    **padded,
                    max_new_tokens=args.max_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row in out[:, padded["input_ids"].shape[1] :]:
                tokens = row.tolist()
                eos = [i for i, t in enumerate(tokens) if t == tokenizer.eos_token_id]
                produced += (eos[0] + 1) if eos else len(tokens)
        return produced

    prompts = [prompt(d) for d in documents(args.corpus, args.hf_docs or args.docs)]
    trial = [prompt(d) for d in documents(args.corpus, 32)]
    best = None
    for dtype in dtypes:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
        generate(model, trial[:4], 4)  # warm-up
        for batch in args.hf_batch_sizes:
            started = time.perf_counter()
            generate(model, trial, batch)
            rate = len(trial) / (time.perf_counter() - started)
            print(
                f"hf trial: {dtype} batch {batch}: {rate:.2f} docs/s", file=sys.stderr, flush=True
            )
            if best is None or rate > best[0]:
                best = (rate, dtype, batch)
        del model
    _, dtype, batch = best
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval()
    generate(model, trial[:4], 4)
    started = time.perf_counter()
    tokens = generate(model, prompts, batch)
    seconds = time.perf_counter() - started
    return {
        "mode": "hf",
        "docs": len(prompts),
        "seconds": seconds,
        "output_tokens": tokens,
        "note": f"batch {batch}, {str(dtype).replace('torch.', '')}",
    }


# -- submit: the producer alone --------------------------------------------------------------


def run_submit(args) -> dict:
    figures = {}
    for count in (args.submit_files // 10, args.submit_files):
        work = Path(tempfile.mkdtemp(prefix="summarize-submit-bench-"))
        try:
            folder = work / "files"
            make_files(folder, count)
            env = os.environ | {
                "SUMMARIZE_DATA_DIR": str(work / "data"),
                "SUMMARIZE_QUEUE": f"submit-bench-{os.getpid()}",
            }
            if args.embedded_submit:
                env.pop("SUMMARIZE_BROKER_URL", None)
            # Create the schema first, so the measurement is of submitting alone.
            subprocess.run(
                [sys.executable, "-m", "summarize.cli", "db", "upgrade"],
                env=env,
                check=True,
                capture_output=True,
            )
            started = time.perf_counter()
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "summarize.cli",
                    "submit",
                    str(folder),
                    "--batch",
                    "submit-bench",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            _, status, usage = os.wait4(process.pid, 0)
            seconds = time.perf_counter() - started
            if status != 0:
                raise SystemExit(f"submit failed: {process.stderr.read().decode()[-2000:]}")
            figures[count] = (count / seconds, usage.ru_maxrss / 1024)
            if not env.get("SUMMARIZE_BROKER_URL"):  # submit stops it when idle; be sure
                from core.broker import EmbeddedRedis
                from core.settings import Settings

                EmbeddedRedis(Settings.from_env(env)).stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (small, (_, small_rss)), (large, (rate, large_rss)) = sorted(figures.items())
    return {
        "mode": "submit",
        "files": large,
        "docs_per_s": rate,
        "peak_rss_mb": large_rss,
        "small_files": small,
        "small_peak_rss_mb": small_rss,
    }


def make_files(folder: Path, count: int, words: int = 40) -> None:
    """Small, distinct news-like documents in folders of 1,000."""
    vocabulary = [
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
    ]
    rng = random.Random(count)
    for i in range(count):
        sub = folder / f"{i // 1000:04d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        body = " ".join(rng.choice(vocabulary) for _ in range(words))
        (sub / f"{i:07d}.txt").write_text(f"Document {i}. {body}.\n")


SUMMARIZE = [sys.executable, "-m", "summarize.cli"]


def _echo_place(name: str) -> tuple[Path, dict]:
    """A temporary folder and the environment of a run with the instant engine, its data and
    queue its own."""
    work = Path(tempfile.mkdtemp(prefix=f"summarize-{name}-"))
    return work, os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_MODEL": "echo",
        "SUMMARIZE_QUEUE": f"{name}-{os.getpid()}",
    }


# -- ceiling: the pipeline's own cost, with the instant engine --------------------------------


def run_ceiling(args) -> dict:
    import sqlalchemy as sa

    from core import broker, database
    from core.settings import Settings
    from readers.views import batch_stats

    figures = {}
    for count in (args.ceiling_docs // 10, args.ceiling_docs):
        work, env = _echo_place(f"ceiling-{count}")
        settings = Settings.from_env(env)
        try:
            make_files(work / "files", count, words=150)
            _empty_postgres_if_asked(settings, args, "ceiling")
            subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
            with broker.session(settings) as client:
                before = client.info("memory")["used_memory"]
                started = time.perf_counter()
                subprocess.run(
                    [*SUMMARIZE, "submit", str(work / "files"), "--batch", "ceiling"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                submit_s = time.perf_counter() - started
                queued_bytes = client.info("memory")["used_memory"] - before
                log = open(work / "worker.log", "wb")  # noqa: SIM115
                worker = subprocess.Popen(
                    [*SUMMARIZE, "worker", "--burst"], env=env, stdout=log, stderr=log
                )
                _, status, usage = os.wait4(worker.pid, 0)
                log.close()
                if status != 0:
                    raise SystemExit((work / "worker.log").read_text()[-3000:])
            db = database.connect(settings)
            with db.connect() as conn:
                row = conn.execute(
                    sa.select(batch_stats).where(batch_stats.c.batch == "ceiling")
                ).one()
            stored = _database_bytes(db)
            db.dispose()
            if row.succeeded != count:
                raise SystemExit(f"ceiling: {row.succeeded} of {count} documents succeeded")
            figures[count] = {
                "submit_docs_per_s": count / submit_s,
                "redis_bytes_per_doc": queued_bytes / count,
                "worker_docs_per_s": row.documents_per_s,
                "worker_peak_rss_mb": usage.ru_maxrss / 1024,
                "database_bytes_per_doc": stored / count,
                "texts_kept": settings.keep_texts,
            }
        finally:
            if settings.embedded_broker:
                broker.EmbeddedRedis(settings).stop()
            shutil.rmtree(work, ignore_errors=True)
    small, large = sorted(figures)
    return {
        "mode": "ceiling",
        "docs": large,
        "small_docs": small,
        "database": settings.database_url.split(":")[0],
        **figures[large],
        "small_worker_peak_rss_mb": figures[small]["worker_peak_rss_mb"],
    }


# -- endtoend: a whole nightly batch, every step a user runs ---------------------------------


def run_endtoend(args) -> dict:
    """`submit`, `worker --burst`, `status` and `results --format jsonl` on one batch of
    --endtoend-docs generated documents (the instant engine), each step's wall time and peak
    memory; the export must hold one line per document."""
    from core import broker
    from core.settings import Settings

    count = args.endtoend_docs
    work, env = _echo_place("endtoend")
    settings = Settings.from_env(env)
    steps = {}
    try:
        make_files(work / "files", count, words=150)
        _empty_postgres_if_asked(settings, args, "endtoend")
        subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
        commands = {
            "submit": ["submit", str(work / "files"), "--batch", "nightly"],
            "worker --burst": ["worker", "--burst"],
            "status": ["status", "nightly"],
            "results --format jsonl": ["results", "--batch", "nightly", "--format", "jsonl"],
        }
        for step, command in commands.items():
            out = work / f"{step.split()[0]}.out"
            steps[step] = _timed([*SUMMARIZE, *command], env, out)
        with open(work / "results.out", "rb") as exported:
            lines = sum(1 for _ in exported)
        if lines != count:
            raise SystemExit(f"endtoend: the export holds {lines:,} lines for {count:,} documents")
    finally:
        if settings.embedded_broker:
            broker.EmbeddedRedis(settings).stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": "endtoend",
        "docs": count,
        "database": settings.database_url.split(":")[0],
        "steps": steps,
    }


def _timed(command: list[str], env: dict, out: Path) -> dict:
    """Run a command to its end, its output to `out`: wall seconds and peak memory."""
    started = time.perf_counter()
    with open(out, "wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed:\n{out.read_text()[-3000:]}")
    return {"seconds": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss / 1024}


# -- startup: what a producer command costs before it does anything ----------------------------


def run_startup(args) -> dict:
    """Median wall time of `summarize --help` in a fresh process (the producer side imports
    neither vLLM, torch nor Celery's worker: tests/test_cli.py holds that)."""
    took = []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "summarize.cli", "--help"], check=True, capture_output=True
        )
        took.append(time.perf_counter() - started)
    return {"mode": "startup", "median_s": sorted(took)[3]}


# -- readers: the dashboards, status and Grafana over many rows ---------------------------------


def run_readers(args) -> dict:
    """Fill `results` through the product's paths, then time every reader against it.

    A corpus of --readers-base documents is submitted and drained by the instant engine,
    then submitted again under other batch names (deduplication answers those rows at
    submit) until `results` holds --readers-rows rows. --readers-dir keeps the data for
    another run.
    """
    from core import broker, database
    from core.settings import Settings

    work = Path(args.readers_dir or tempfile.mkdtemp(prefix="summarize-readers-"))
    env = os.environ | {
        "SUMMARIZE_DATA_DIR": str(work / "data"),
        "SUMMARIZE_MODEL": "echo",
        "SUMMARIZE_QUEUE": "readers",
    }
    settings = Settings.from_env(env)
    try:
        if not (work / "files").exists():
            _empty_postgres_if_asked(settings, args, "readers")
            make_files(work / "files", args.readers_base, words=40)
        db = database.ready(settings)
        with broker.session(settings):
            night = _rows(db) // args.readers_base
            while _rows(db) < args.readers_rows:
                started = time.perf_counter()
                subprocess.run(
                    [*SUMMARIZE, "submit", str(work / "files"), "--batch", f"night-{night:03d}"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                if night == 0:
                    subprocess.run(
                        [*SUMMARIZE, "worker", "--burst"], env=env, check=True, capture_output=True
                    )
                print(
                    f"  readers: {_rows(db):,} rows ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
                night += 1
        timings = {name: _median_ms(read) for name, read in _readers(db).items()}
        rows = _rows(db)
        db.dispose()
    finally:
        if settings.embedded_broker:
            broker.EmbeddedRedis(settings).stop()
        if not args.readers_dir:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": "readers",
        "rows": rows,
        "database": settings.database_url.split(":")[0],
        "ms": timings,
    }


def _rows(db) -> int:
    import sqlalchemy as sa

    with db.connect() as conn:
        return conn.execute(
            sa.text("SELECT coalesce(sum(documents), 0) FROM batch_rollups")
        ).scalar()


def _median_ms(read, times: int = 7) -> float:
    read()  # warm: the first read pays for the connection and the page cache
    took = []
    for _ in range(times):
        started = time.perf_counter()
        read()
        took.append((time.perf_counter() - started) * 1000)
    return sorted(took)[times // 2]


def _readers(db) -> dict:
    """Each reader a user meets: the dashboard's endpoints, status, batches, Grafana's panels."""
    import re

    import sqlalchemy as sa
    from starlette.testclient import TestClient

    from readers import status
    from readers.dashboard.app import create_app

    client = TestClient(create_app(db))

    def get(path):
        return lambda: client.get(path).raise_for_status()

    readers = {
        "/api/overview": get("/api/overview"),
        "/api/batches/night-000 (generated)": get("/api/batches/night-000"),
        "/api/batches/night-001 (deduplicated)": get("/api/batches/night-001"),
        "summarize status": lambda: status.batch_status(db, status.latest_batches(db, 5)),
        "summarize batches": lambda: status.batch_status(db, status.latest_batches(db, 20)),
    }
    since = "'2000-01-01'"
    grafana = json.loads((ROOT / "deploy/grafana/dashboards/summarize.json").read_text())
    for panel in grafana["panels"]:
        for target in panel.get("targets", []):
            if "rawSql" not in target:  # a Prometheus panel: it reads the workers, not SQL
                continue
            sql = re.sub(r"\$__timeFilter\(([\w.]+)\)", rf"\1 >= {since}", target["rawSql"])

            def query(sql=sql):
                with db.connect() as conn:
                    conn.execute(sa.text(sql)).all()

            readers[f"grafana: {panel['title']}"] = query
    return readers


def _database_bytes(db) -> int:
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


def _empty_postgres_if_asked(settings, args, mode: str) -> None:
    """A PostgreSQL database is emptied first, and only when --empty-database says so."""
    if not settings.database_url.startswith("postgresql"):
        return
    if not args.empty_database:
        raise SystemExit(
            f"{mode} empties the PostgreSQL database it is given: "
            "add --empty-database if that is what you want"
        )
    _empty_postgres(settings.database_url)


def _empty_postgres(url: str) -> None:
    import sqlalchemy as sa

    db = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with db.begin() as conn:
        conn.execute(sa.text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))
    db.dispose()


# -- the report ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    parser.add_argument("--pdfs-count", type=int, default=2000, help="pdfs: how many PDFs")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="pdfs: also time the submit of this checkout (another commit's worktree)",
    )
    parser.add_argument("--_child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.max_tokens is None:
        from core.settings import Settings

        args.max_tokens = Settings.from_env().summary_max_tokens
    os.environ["SUMMARIZE_MAX_TOKENS"] = str(args.max_tokens)
    if args._child:
        runner = {"raw": run_raw, "hf": run_hf, "quality-raw": run_quality_raw}[args._child]
        print(json.dumps(runner(args)), flush=True)
        return

    modes = args.modes.split(",")
    print(
        f"corpus {args.corpus} ({len(documents(args.corpus, args.docs))} documents), "
        f"max_tokens {args.max_tokens}, profile {os.environ.get('SUMMARIZE_PROFILE', 'throughput')}",
        flush=True,
    )
    runs: dict[str, list[dict]] = {}
    for mode in modes:
        if mode in ("raw", "hf"):
            result = child(mode, args)
        elif mode in RUNNERS:
            result = RUNNERS[mode](args)
        else:
            raise SystemExit(f"unknown mode {mode!r}")
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


RUNNERS = {
    "hostile": bench_inputs.run_hostile,
    "pdfs": bench_inputs.run_pdfs,
    "pipeline": run_pipeline,
    "submit": run_submit,
    "ceiling": run_ceiling,
    "startup": run_startup,
    "endtoend": run_endtoend,
    "readers": run_readers,
    "quality": run_quality,
    "long": run_long,
}


def report(result: dict) -> None:
    if bench_inputs.report(result):
        return
    if result["mode"] == "long":
        print(
            f"long      {result['docs']} whole aclsum papers as Markdown ({result['words']:,.0f} "
            f"words, {result['parts']:.1f} parts each): {result['stopped']} ended by stop, "
            f"{result['still_looped']} still loop"
        )
        s, lead = result["summaries"], result["lead"]
        print(
            f"  ROUGE-1/2/L {s['rouge1']:.3f} {s['rouge2']:.3f} {s['rougeL']:.3f}  lead "
            f"{result['lead_words']} words {lead['rouge1']:.3f} {lead['rouge2']:.3f} "
            f"{lead['rougeL']:.3f}"
        )
        return
    if result["mode"] == "quality":
        print(
            f"quality   {result['docs']} of {result['papers']} aclsum papers (those that fit one prompt)"
        )
        print(
            f"  {'':<22}{'ROUGE-1':>8}{'ROUGE-2':>8}{'ROUGE-L':>8}{'looped':>8}{'cut':>6}{'novel#':>8}"
        )
        for stage, label in (
            ("greedy", "greedy alone (raw)"),
            ("again", "+ loops again (raw)"),
            ("limited", "+ sentence limit (raw)"),
            ("pipeline", "pipeline + eval"),
        ):
            r = result[stage]
            looped = r.get("looped", r.get("signals", {}).get("looped"))
            cut = r.get("truncated", r.get("signals", {}).get("truncated"))
            print(
                f"  {label:<22}"
                + "".join(f"{r['summaries'][k]:>8.3f}" for k in ("rouge1", "rouge2", "rougeL"))
                + f"{looped:>8.0%}{cut:>6.0%}{r['novel']:>8.0%}"
            )
            print(
                f"  {'  lead ' + str(r['lead_words']) + ' words':<22}"
                + "".join(f"{r['lead'][k]:>8.3f}" for k in ("rouge1", "rouge2", "rougeL"))
            )
        return
    if result["mode"] == "startup":
        print(f"startup   summarize --help in {result['median_s'] * 1000:.0f} ms (median of 7)")
        return
    if result["mode"] == "endtoend":
        print(f"endtoend  {result['docs']:>9,} docs ({result['database']}, echo engine):")
        for step, took in result["steps"].items():
            print(
                f"  {took['seconds']:>8.1f} s  {took['peak_rss_mb']:>6.0f} MB peak  {step}",
                flush=True,
            )
        return
    if result["mode"] == "readers":
        print(f"readers   {result['rows']:>9,} rows ({result['database']}), median of 7:")
        for name, ms in result["ms"].items():
            print(f"  {ms:>8.1f} ms  {name}", flush=True)
        return
    if result["mode"] == "ceiling":
        print(
            f"ceiling   {result['docs']:>7,} docs  ({result['database']}, echo engine)  "
            f"worker {result['worker_docs_per_s']:>8,.0f} docs/s  submit "
            f"{result['submit_docs_per_s']:>7,.0f} docs/s  Redis "
            f"{result['redis_bytes_per_doc']:.0f} bytes/doc queued  worker peak RSS "
            f"{result['worker_peak_rss_mb']:.0f} MB ({result['small_docs']:,} docs: "
            f"{result['small_worker_peak_rss_mb']:.0f} MB)  database "
            f"{result['database_bytes_per_doc']:,.0f} bytes/doc (texts "
            f"{'kept' if result['texts_kept'] else 'dropped'})",
            flush=True,
        )
        return
    if result["mode"] == "submit":
        print(
            f"submit    {result['files']:>7,} files  {result['docs_per_s']:>8,.0f} docs/s  "
            f"peak RSS {result['peak_rss_mb']:.0f} MB ({result['small_files']:,} files: "
            f"{result['small_peak_rss_mb']:.0f} MB)",
            flush=True,
        )
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


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    main()
