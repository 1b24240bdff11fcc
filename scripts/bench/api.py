"""api: `summarize serve` beside `summarize submit` on one OpenAI batch input file.

Two measurements, each against a server process driven by the official `openai` client:
- upload and create: --api-requests requests (100,000, and a tenth of them, to show the
  server's memory does not grow with the file) uploaded, their batch created and validated
  (until it leaves `validating`), beside `summarize submit` of the same file; the server's
  resident memory before the upload and at its peak;
- the round trip with the instant engine and a running worker: --api-round-trip requests
  uploaded, created, polled until `completed` and the output file downloaded, beside
  `summarize submit --wait` then `summarize results --format openai` of the same file.
Each run has a data folder, a database and a queue of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from scripts.bench.common import (
    SAMPLES,
    SUMMARIZE,
    VOCABULARY,
    echo_place,
    measured,
    running_worker,
)

POLL_S = 0.2  # how often the client asks for the batch, as a script written for OpenAI would
ENDED = ("completed", "failed", "expired", "cancelled")


def run(args) -> dict:
    sizes = (args.api_requests // 10, args.api_requests)
    uploads = {count: _upload_beside_submit(count) for count in sizes}
    return {
        "mode": "api",
        "uploads": uploads,
        "round_trip": _round_trip(args.api_round_trip),
    }


def batch_input(path: Path, count: int, words: int = 40) -> Path:
    """An OpenAI batch input file of `count` chat requests, each a distinct short text."""
    rng = random.Random(count)
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            text = f"Document {i}. " + " ".join(rng.choice(VOCABULARY) for _ in range(words))
            request = {
                "custom_id": f"request-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "any", "messages": [{"role": "user", "content": text + "."}]},
            }
            out.write(json.dumps(request) + "\n")
    return path


@contextlib.contextmanager
def serving(env: dict, work: Path):
    """`summarize serve --port 0` in its own process: yields its URL and process."""
    log = open(work / "serve.log", "wb")  # noqa: SIM115
    process = subprocess.Popen(
        [*SUMMARIZE, "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        line = process.stdout.readline().decode() if ready else ""
        match = re.search(r"on (http://\S+/v1) ", line)
        if not match:
            raise SystemExit(f"summarize serve did not start: {line!r}")
        yield match.group(1), process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)
        log.close()


class Peak:
    """A process's resident memory sampled every 20 ms: `first` and `most`, in MB."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.first = self.most = self.process.memory_info().rss / 2**20
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while self.running:
            self.most = max(self.most, self.process.memory_info().rss / 2**20)
            time.sleep(0.02)

    def stop(self) -> None:
        self.running = False
        self.thread.join()


def _client(url: str):
    import openai

    return openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=3600)


def _upgraded(env: dict) -> None:
    subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)


def _upload_beside_submit(count: int) -> dict:
    submit_work, submit_env = echo_place("api-submit")
    path = batch_input(submit_work / "in.jsonl", count)
    megabytes = path.stat().st_size / 2**20
    _upgraded(submit_env)
    submitted = measured(
        [*SUMMARIZE, "submit", str(path), "--batch", "bench"],
        submit_env,
        submit_work / "submit.log",
    )
    _stop_embedded(submit_env)
    work, env = echo_place("api-serve")
    _upgraded(env)
    with serving(env, work) as (url, process):
        peak = Peak(process.pid)
        client = _client(url)
        started = time.perf_counter()
        with path.open("rb") as handle:
            uploaded = client.files.create(file=handle, purpose="batch")
        upload_s = time.perf_counter() - started
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        while batch.status == "validating":
            time.sleep(POLL_S)
            batch = client.batches.retrieve(batch.id)
        created_s = time.perf_counter() - started
        peak.stop()
        if batch.status != "in_progress" or batch.request_counts.total != count:
            raise SystemExit(f"api: the batch is {batch.status} with {batch.request_counts}")
    _stop_embedded(env)
    for folder in (submit_work, work):
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "requests": count,
        "megabytes": megabytes,
        "submit_s": submitted["seconds"],
        "upload_s": upload_s,
        "created_s": created_s,
        "server_first_mb": peak.first,
        "server_most_mb": peak.most,
    }


def _round_trip(count: int) -> dict:
    """Seconds from the first byte sent to the output file written, both ways, each with a
    running worker of the instant engine warmed up on the samples first."""
    took = {}
    for way in ("submit", "serve"):
        work, env = echo_place(f"api-{way}-trip")
        path = batch_input(work / "in.jsonl", count)
        out = work / "out.jsonl"
        _upgraded(env)
        (work / "worker").mkdir()
        with running_worker(env, work / "worker"):
            subprocess.run(
                [*SUMMARIZE, "submit", str(SAMPLES), "--batch", "warm-up", "--wait"],
                env=env,
                check=True,
                capture_output=True,
            )
            if way == "submit":
                started = time.perf_counter()
                for command in (
                    ["submit", str(path), "--batch", "trip", "--wait", "--timeout", "3600"],
                    ["results", "--batch", "trip", "--format", "openai", "--output", str(out)],
                ):
                    subprocess.run([*SUMMARIZE, *command], env=env, check=True, capture_output=True)
                took[way] = time.perf_counter() - started
            else:
                with serving(env, work) as (url, _):
                    took[way] = _trip_through_the_api(_client(url), path, out)
            with out.open("rb") as written:
                lines = sum(1 for _ in written)
            if lines != count:
                raise SystemExit(f"api: {way}'s output holds {lines:,} lines for {count:,}")
        _stop_embedded(env)
        shutil.rmtree(work, ignore_errors=True)
    return {"requests": count, **{f"{way}_s": s for way, s in took.items()}}


def _trip_through_the_api(client, path: Path, out: Path) -> float:
    started = time.perf_counter()
    with path.open("rb") as handle:
        uploaded = client.files.create(file=handle, purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while batch.status not in ENDED:
        time.sleep(POLL_S)
        batch = client.batches.retrieve(batch.id)
    if batch.status != "completed":
        raise SystemExit(f"api: the round trip's batch is {batch.status}")
    client.files.content(batch.output_file_id).write_to_file(out)
    return time.perf_counter() - started


def _stop_embedded(env: dict) -> None:
    from core import broker
    from core.settings import Settings

    settings = Settings.from_env(env)
    if settings.embedded_broker:
        broker.EmbeddedRedis(settings).stop()


def report(result: dict) -> None:
    print("api       OpenAI batch input files, the instant engine's model:")
    for figures in result["uploads"].values():
        print(
            f"  {figures['requests']:>9,} requests ({figures['megabytes']:.1f} MB): submit {figures['submit_s']:.1f} s; upload "
            f"{figures['upload_s']:.1f} s, created and validated {figures['created_s']:.1f} s "
            f"({figures['created_s'] / figures['submit_s']:.2f}x submit); server "
            f"{figures['server_first_mb']:.0f} MB at start, {figures['server_most_mb']:.0f} MB "
            "at most",
            flush=True,
        )
    trip = result["round_trip"]
    rate = {way: trip["requests"] / trip[f"{way}_s"] for way in ("submit", "serve")}
    print(
        f"  round trip of {trip['requests']:,} requests: submit --wait + results "
        f"{trip['submit_s']:.1f} s ({rate['submit']:,.0f}/s); upload, create, poll, download "
        f"{trip['serve_s']:.1f} s ({rate['serve']:,.0f}/s): {rate['serve'] / rate['submit']:.2f}x",
        flush=True,
    )
