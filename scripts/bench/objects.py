"""s3: the same small text files submitted from a local folder and as objects of an S3 bucket
(moto's S3 server on loopback), in turn: each submit's wall time and peak memory."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from scripts.bench.common import SUMMARIZE, echo_place, make_files, measured

BUCKET = "bench"
UPLOADERS = 16  # objects put at once while the bucket is filled


def run(args) -> dict:
    """--s3-objects files of 40 words (in folders of 1,000), uploaded to a bucket; then
    `summarize submit FOLDER` and `summarize submit s3://bench/files/` in turn,
    --s3-rounds times, each into a database of its own."""
    count = args.s3_objects
    work, env = echo_place("s3")
    port = _free_port()
    env |= {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    server = subprocess.Popen(
        ["moto_server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    steps: dict[str, list[dict]] = {"local folder": [], "S3 prefix": []}
    try:
        _wait_for(port)
        folder = work / "files"
        make_files(folder, count)
        _upload(folder, env)
        for round_ in range(args.s3_rounds):
            for step, path in (
                ("local folder", str(folder)),
                ("S3 prefix", f"s3://{BUCKET}/files/"),
            ):
                name = f"{step.split()[0]}-{round_}"
                steps[step].append(
                    _submit(
                        path,
                        env | {"SUMMARIZE_DATA_DIR": str(work / name)},
                        work / f"{name}.out",
                        count,
                    )
                )
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    return {"mode": "s3", "docs": count, "steps": steps}


def _submit(path: str, env: dict, log, count: int) -> dict:
    """One submit into a database of its own, measured; refused unless it queued them all."""
    from core import broker
    from core.settings import Settings

    subprocess.run([*SUMMARIZE, "db", "upgrade"], env=env, check=True, capture_output=True)
    try:
        took = measured([*SUMMARIZE, "submit", path, "--batch", "s3"], env, log)
    finally:
        broker.EmbeddedRedis(Settings.from_env(env)).stop()
    queued = re.search(r"queued\s+([\d,]+)", log.read_text())
    if queued is None or int(queued.group(1).replace(",", "")) != count:
        raise SystemExit(
            f"s3: the submit of {path} did not queue {count:,}:\n{log.read_text()[-2000:]}"
        )
    return took


def _upload(folder, env: dict) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    files = sorted(path for path in folder.rglob("*.txt"))

    def put(path) -> None:
        key = f"files/{path.relative_to(folder)}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())

    with ThreadPoolExecutor(UPLOADERS) as pool:
        list(pool.map(put, files))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("s3: moto_server did not start (pip install -e '.[test]')")


def report(result: dict) -> None:
    count = result["docs"]
    print(f"s3        {count:>9,} text files (sqlite, submit only):")
    totals = {}
    for step, runs in result["steps"].items():
        for took in runs:
            print(
                f"  {took['seconds']:>8.1f} s  {count / took['seconds']:>8,.0f} docs/s  "
                f"{took['peak_tree_mb']:>6.0f} MB peak  {step}",
                flush=True,
            )
        seconds = sum(took["seconds"] for took in runs)
        peak = max(took["peak_tree_mb"] for took in runs)
        totals[step] = (count * len(runs) / seconds, peak)
    (local, local_mb), (remote, remote_mb) = totals["local folder"], totals["S3 prefix"]
    print(
        f"  S3/local (rate) = {remote / local:.2f}; peak memory S3 - local = "
        f"{remote_mb - local_mb:+.0f} MB",
        flush=True,
    )
