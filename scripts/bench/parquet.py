"""parquet: the same records as one Parquet file and as JSON lines, submitted in turn; then the
batch exported as Parquet and as JSON lines, in turn. Each step's wall time and peak memory."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

from scripts.bench.common import SUMMARIZE, VOCABULARY, echo_place, measured, timed


def run(args) -> dict:
    """--parquet-rows records of 60 words with an id and two other fields, written both ways;
    each submitted into its own batch, then the Parquet batch drained with the instant engine
    and exported both ways."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core import broker
    from core.settings import Settings

    count = args.parquet_rows
    work, env = echo_place("parquet")
    settings = Settings.from_env(env)
    rng = random.Random(0)
    steps = {}
    try:
        for kind in ("parquet", "jsonl"):
            (work / kind).mkdir()
        with open(work / "jsonl" / "records.jsonl", "w", encoding="utf-8") as lines:
            writer = None
            for start in range(0, count, 100_000):
                chunk = [_record(i, rng) for i in range(start, min(count, start + 100_000))]
                for record in chunk:
                    lines.write(json.dumps(record) + "\n")
                table = pa.Table.from_pylist(chunk)
                if writer is None:
                    writer = pq.ParquetWriter(work / "parquet" / "records.parquet", table.schema)
                writer.write_table(table, row_group_size=10_000)
            writer.close()
        subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
        for kind in ("jsonl", "parquet"):
            command = [*SUMMARIZE, "submit", str(work / kind), "--batch", kind]
            steps[f"submit {kind}"] = measured(command, env, work / f"submit-{kind}.out")
        timed([*SUMMARIZE, "worker", "--burst"], env, work / "worker.out")
        for kind in ("jsonl", "parquet"):
            out = work / f"results.{kind}"
            command = [*SUMMARIZE, "results", "--batch", "parquet", "--format", kind]
            log = work / f"results-{kind}.log"
            steps[f"results --format {kind}"] = measured([*command, "--output", str(out)], env, log)
        exported = pq.ParquetFile(work / "results.parquet").metadata.num_rows
        if exported != count:
            raise SystemExit(f"parquet: the export holds {exported:,} rows for {count:,}")
    finally:
        if settings.embedded_broker:
            broker.EmbeddedRedis(settings).stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"mode": "parquet", "docs": count, "steps": steps}


def _record(i: int, rng: random.Random) -> dict:
    return {
        "id": f"r{i}",
        "text": " ".join(rng.choice(VOCABULARY) for _ in range(60)) + f" {i}.",
        "source": rng.choice(["wire", "desk", "blog"]),
        "words": 61,
    }


def report(result: dict) -> None:
    print(f"parquet   {result['docs']:>9,} records (sqlite, echo engine):")
    steps = result["steps"]
    for step, took in steps.items():
        rate = result["docs"] / took["seconds"]
        print(
            f"  {took['seconds']:>8.1f} s  {rate:>8,.0f} records/s  "
            f"{took['peak_tree_mb']:>6.0f} MB peak  {step}",
            flush=True,
        )
    submit = steps["submit jsonl"]["seconds"] / steps["submit parquet"]["seconds"]
    export = (
        steps["results --format jsonl"]["seconds"] / steps["results --format parquet"]["seconds"]
    )
    print(
        f"  submit parquet/jsonl (rate) = {submit:.2f}; export parquet/jsonl (rate) = {export:.2f}"
    )
