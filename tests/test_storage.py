"""Corpora in object storage and results written back to it, against a real S3 API (moto's
server on loopback, tests/services.py) and fsspec's own filesystems.

A prefix is submitted as a folder is: the same kinds by suffix, the same limits and failed
rows, the same deduplication, with each object's URL as its `source_path`.
"""

from __future__ import annotations

import importlib
import io
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from core import errors
from jobs import corpus, objects, records
from jobs.documents import Text, Unreadable
from tests.documents import pdf_bytes
from tests.helpers import all_rows, rows_by_name, run, summary_line
from tests.services import free_port
from tests.stack import cli

NEWS = "The council met on Tuesday. It voted to build a new library by the river."


def parquet_bytes(table: dict) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table(table), out)
    return out.getvalue()


def test_a_prefix_is_submitted_as_a_folder_is(bucket, env, db):
    bucket.put("news/a.txt", NEWS)
    bucket.put("news/b.md", "# Weather\n\nRain is expected on *Friday* across the north.")
    bucket.put("news/deep/c.pdf", pdf_bytes(["A bridge will close for repairs in May."]))
    bucket.put("news/deep/same-as-a.txt", NEWS)
    bucket.put("news/photo.png", b"\x89PNG\r\n")
    bucket.put(
        "news/records.jsonl",
        '{"id": "r1", "text": "First record."}\n{"id": "r2", "text": "Second."}\n',
    )
    bucket.put("news/table.parquet", parquet_bytes({"id": ["p1"], "text": ["A row."], "n": [7]}))
    bucket.put("elsewhere/not-this.txt", "Outside the prefix.")

    result = run(env, "submit", bucket.url("news/"), "--batch", "night")

    assert result.exit_code == 0, result.output
    rows = {row.source_path: row for row in all_rows(db, "night")}
    assert sorted(rows) == [
        bucket.url("news/a.txt"),
        bucket.url("news/b.md"),
        bucket.url("news/deep/c.pdf"),
        bucket.url("news/deep/same-as-a.txt"),
        bucket.url("news/records.jsonl:1"),
        bucket.url("news/records.jsonl:2"),
        bucket.url("news/table.parquet:1"),
    ]
    assert {row.status for row in rows.values()} == {"queued"}
    assert rows[bucket.url("news/records.jsonl:2")].doc_id == "r2"
    assert json.loads(rows[bucket.url("news/table.parquet:1")].metadata) == {"n": 7}
    same = rows[bucket.url("news/deep/same-as-a.txt")]
    assert same.deduplicated and same.content_hash == rows[bucket.url("news/a.txt")].content_hash
    assert summary_line(result.output, "skipped") == 1
    assert summary_line(result.output, "queued") == 6


def test_each_object_that_cannot_be_used_is_a_failed_row_of_its_own(bucket, env, db):
    bucket.put("in/good.txt", NEWS)
    bucket.put("in/frozen.txt", "Archived text.", StorageClass="GLACIER")  # GET is refused
    bucket.put("in/huge.txt", "x" * 2_000)
    bucket.put("in/binary.txt", b"\x00\x01\x02")
    bucket.put("in/broken.pdf", b"%PDF-1.4 not really")

    env = env | {"SUMMARIZE_MAX_DOC_BYTES": "1000"}
    result = run(env, "submit", bucket.url("in/"), "--batch", "dirty")

    assert result.exit_code == 0, result.output
    rows = rows_by_name(db, "dirty")
    assert rows["good.txt"].status == "queued"
    failed = {name: row.error for name, row in rows.items() if row.status == "failed"}
    assert sorted(failed) == ["binary.txt", "broken.pdf", "frozen.txt", "huge.txt"]
    assert failed["frozen.txt"].startswith("cannot be read (access denied: PermissionError")
    assert "2,000 bytes > 1,000" in failed["huge.txt"]
    assert failed["binary.txt"].startswith("binary file")
    assert failed["broken.pdf"].startswith("not a PDF")


def test_a_prefix_or_bucket_that_is_not_there_is_refused_by_name(bucket, env):
    result = run(env, "submit", bucket.url("nothing/"), "s3://no-such-bucket-here/x/")

    assert result.exit_code == errors.EXIT_ERROR
    assert "No path given could be used" in result.output
    assert "does not exist (no such bucket, container or key)" in result.output


def test_storage_that_does_not_answer_exits_5_and_shows_no_secret(bucket, env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-never-shown")
    options = {
        "s3": {
            "config_kwargs": {"retries": {"max_attempts": 1}},
            "key": "k",
            "secret": "opt-s3cr3t",
        }
    }
    env = env | {"SUMMARIZE_STORAGE_OPTIONS": json.dumps(options)}

    result = run(env, "submit", bucket.url("news/"))

    assert result.exit_code == errors.EXIT_UNREACHABLE, result.output
    assert f"{bucket.url('news/')} cannot be listed (EndpointConnectionError" in result.output
    assert "check the endpoint (AWS_ENDPOINT_URL, SUMMARIZE_STORAGE_OPTIONS)" in result.output
    assert "s3cr3t" not in result.output


def test_bad_storage_options_are_refused_without_showing_them(env):
    env = env | {"SUMMARIZE_STORAGE_OPTIONS": '{"s3": "key=s3cr3t"}'}

    result = run(env, "submit", "s3://bucket/")

    assert result.exit_code == errors.EXIT_ERROR
    assert "SUMMARIZE_STORAGE_OPTIONS (not shown: it may hold secrets) must be" in result.output
    assert "s3cr3t" not in result.output


def test_a_missing_storage_library_is_named_with_its_extra(env, monkeypatch):
    registry = importlib.import_module("fsspec.registry")  # the module, not fsspec.registry

    monkeypatch.setitem(  # as on a machine without gcsfs, whatever this one has
        registry.known_implementations,
        "gs",
        {"class": "summarize_no_such_module.GCSFileSystem", "err": "Please install gcsfs"},
    )
    monkeypatch.delitem(registry._registry, "gs", raising=False)

    result = run(env, "submit", "gs://bucket/corpus/")

    assert result.exit_code == errors.EXIT_ERROR
    assert "gs:// needs its storage library: pip install 'summarize[gcs]'." in result.output


def test_a_listing_is_read_a_page_at_a_time_in_key_order(bucket, monkeypatch):
    import fsspec.asyn

    monkeypatch.setattr(objects, "PAGE_KEYS", 4)
    pages: list[int] = []
    sync = fsspec.asyn.sync

    def counted(*args, **kwargs):
        result = sync(*args, **kwargs)
        pages.append(len(result))
        return result

    monkeypatch.setattr(fsspec.asyn, "sync", counted)
    names = [f"many/{i:02d}.txt" for i in range(11)] + ["many/sub/z.txt"]
    for name in reversed(names):
        bucket.put(name, f"Text {name}.")

    found = list(corpus.found_in([bucket.url("many")]))

    assert [item.path for item in found] == [bucket.url(name) for name in names]
    assert [item.size for item in found] == [len(f"Text {name}.") for name in names]
    assert pages[-4:] == [4, 4, 4, 0]


class Flaky(MemoryFileSystem):
    """fsspec's memory filesystem whose reads fail as a network does: every key failing
    `failures[key]` times before it answers, and fetching many at once failing always."""

    protocol = "flaky"
    failures: dict[str, int] = {}

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.removeprefix("flaky://"))

    def cat_ranges(self, *args, **kwargs):
        raise ConnectionError("the connection was reset")

    def cat_file(self, path, start=None, end=None, **kwargs):
        key = self._strip_protocol(path)
        if self.failures.get(key, 0) > 0:
            self.failures[key] -= 1
            raise ConnectionError("the connection was reset")
        return super().cat_file(path, start, end, **kwargs)


@pytest.fixture
def flaky(monkeypatch):
    fsspec.register_implementation("flaky", Flaky, clobber=True)
    store = Flaky.store = {}
    monkeypatch.setattr(Flaky, "store", store)
    monkeypatch.setattr(Flaky, "failures", {})
    return Flaky()


def test_an_object_that_fails_for_a_while_is_fetched_again_and_one_that_keeps_failing_is_a_row(
    flaky,
):
    flaky.pipe("/docs/once.txt", b"Read at the second try.")
    flaky.pipe("/docs/never.txt", b"Never read.")
    Flaky.failures.update({"/docs/once.txt": 1, "/docs/never.txt": 99})

    loaded = [
        corpus.load(found, 1000)
        for found in objects.fetched(corpus.found_in(["flaky://docs/"]), 1000)
    ]

    assert [type(item) for item in loaded] == [Unreadable, Text]
    assert loaded[0].path == "flaky:///docs/never.txt"
    assert loaded[0].reason == (
        "cannot be read (ConnectionError: the connection was reset, after 3 attempts)"
    )
    assert loaded[1].body == "Read at the second try."


def test_an_object_removed_after_it_was_listed_is_a_row_that_says_so(flaky):
    flaky.pipe("/docs/gone.txt", b"Listed, then deleted.")
    listed = list(corpus.found_in(["flaky://docs/"]))
    flaky.rm("/docs/gone.txt")

    (gone,) = [corpus.load(found, 1000) for found in objects.fetched(listed, 1000)]

    assert gone == Unreadable(
        "flaky:///docs/gone.txt", "does not exist (removed since it was listed?)"
    )


def test_a_large_record_object_is_counted_from_its_start_not_downloaded_twice(bucket, monkeypatch):
    monkeypatch.setattr(records, "SAMPLED_BYTES", 1000)
    lines = "".join(json.dumps({"text": f"Record {i:04d}."}) + "\n" for i in range(500))
    bucket.put("big.jsonl", lines)
    (found,) = corpus.found_in([bucket.url("big.jsonl")])

    assert 475 <= records.estimate(found) <= 525


def test_results_are_written_to_a_url_whole_or_not_at_all(bucket, env, db, tmp_path):
    bucket.put("in/a.txt", NEWS)
    bucket.put("in/b.txt", "Second text. It is short.")
    assert run(env, "submit", bucket.url("in/"), "--batch", "out").exit_code == 0

    parquet = run(
        env,
        "results",
        "--batch",
        "out",
        "--format",
        "parquet",
        "--output",
        bucket.url("out/night.parquet"),
    )
    lines = run(env, "results", "--batch", "out", "--output", bucket.url("out/night.jsonl"))

    assert parquet.exit_code == 0 and lines.exit_code == 0, parquet.output + lines.output
    assert bucket.keys() == ["in/a.txt", "in/b.txt", "out/night.jsonl", "out/night.parquet"]
    table = pq.read_table(io.BytesIO(bucket.get("out/night.parquet")))
    assert sorted(table.column("source_path").to_pylist()) == [
        bucket.url("in/a.txt"),
        bucket.url("in/b.txt"),
    ]
    assert str(table.schema.field("created_at").type) == "timestamp[us, tz=UTC]"
    exported = [json.loads(line) for line in bucket.get("out/night.jsonl").splitlines()]
    assert sorted(row["source_path"] for row in exported) == sorted(
        r.source_path for r in all_rows(db, "out")
    )

    refused = run(env, "results", "--batch", "out", "--output", "s3://no-such-bucket-here/x.jsonl")

    assert refused.exit_code == errors.EXIT_UNREACHABLE
    assert "Could not write s3://no-such-bucket-here/x.jsonl (FileNotFoundError" in refused.output
    assert "nothing was written there" in refused.output


def test_a_corpus_in_s3_runs_end_to_end_into_parquet_in_s3(bucket, tmp_path, redis_url, queue_name):
    bucket.put("night/a.txt", "Alpha is first. Then beta.")
    bucket.put("night/b.md", "Gamma rays are bright! Delta follows.")
    bucket.put("night/c.jsonl", '{"id": "c1", "text": "Epsilon ends it. Zeta."}\n')
    env = bucket.env | {
        "SUMMARIZE_DATA_DIR": str(tmp_path / "data"),
        "SUMMARIZE_BROKER_URL": redis_url,
        "SUMMARIZE_QUEUE": queue_name,
        "SUMMARIZE_MODEL": "echo",
    }

    done = cli(env, "run", bucket.url("night/"), "--batch", "night", timeout_s=120)
    again = cli(env, "run", bucket.url("night/"), "--batch", "night", timeout_s=120)
    out = cli(
        env,
        "results",
        "--batch",
        "night",
        "--format",
        "parquet",
        "--output",
        bucket.url("out/night.parquet"),
    )

    assert done.returncode == 0, done.stderr
    assert "3 of 3 finished: 3 succeeded" in done.stdout
    assert (
        again.returncode == 0 and summary_line(again.stderr + again.stdout, "already in batch") == 3
    )
    assert out.returncode == 0, out.stderr
    table = pq.read_table(io.BytesIO(bucket.get("out/night.parquet"))).to_pylist()
    assert sorted((row["source_path"], row["summary"]) for row in table) == [
        (bucket.url("night/a.txt"), "Alpha is first."),
        (bucket.url("night/b.md"), "Gamma rays are bright!"),
        (bucket.url("night/c.jsonl:1"), "Epsilon ends it."),
    ]
