"""The worker's Prometheus metrics, served on SUMMARIZE_METRICS_PORT when it is set.

What it wrote (documents by outcome, tokens, failures by reason), counted once a wave
of outcomes has committed; what it holds and what waits (documents in its hands,
documents queued per model, read at each scrape from the batch rollups); and vLLM's
own engine metrics (`vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc`, …), which the engine records in the same registry once
its statistics are on. Rates (documents and tokens a second) are Prometheus's
`rate()` of the counters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import sqlalchemy as sa
from prometheus_client import REGISTRY, Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core.errors import SettingsError
from core.requeue import queued_by_model
from core.tables import Status
from worker.recorder import TEXT_GONE
from worker.work import Outcome

log = logging.getLogger("summarize.worker")

DOCUMENTS = Counter(
    "summarize_documents", "Documents whose outcome was written, by status", ["status"]
)
TOKENS = Counter("summarize_tokens", "Tokens the engine took in and wrote, by kind", ["kind"])
FAILURES = Counter("summarize_failures", "Documents that failed, by reason", ["reason"])
RETRIES = Counter("summarize_retries", "Documents queued again after a failed attempt")

# A failure's reason, from the start of its error text (worker/drain.py writes them): a label
# with a handful of values, where the error text itself has one per document.
REASONS = (
    ("document too long", "too_long"),
    ("gave up after", "worker_died"),
    (TEXT_GONE[:40], "text_gone"),
)


# Every label value from the start, at 0: a rate() over a series that appears late misses its
# first increase, and a panel shows "no data" rather than none.
for _status in (Status.SUCCEEDED, Status.FAILED):
    DOCUMENTS.labels(_status)
for _kind in ("prompt", "completion", "cached"):
    TOKENS.labels(_kind)
for _reason in (*(name for _, name in REASONS), "engine_error"):
    FAILURES.labels(_reason)


def reason(error: str | None) -> str:
    for start, name in REASONS:
        if (error or "").startswith(start):
            return name
    return "engine_error"  # an exception the engine raised for this document


def observe(outcomes: Iterable[Outcome]) -> None:
    """Count a committed wave of outcomes."""
    for outcome in outcomes:
        if outcome.status == Status.QUEUED:
            RETRIES.inc()
            continue
        DOCUMENTS.labels(outcome.status).inc()
        if outcome.status == Status.FAILED:
            FAILURES.labels(reason(outcome.error)).inc()
        TOKENS.labels("prompt").inc(outcome.prompt_tokens or 0)
        TOKENS.labels("completion").inc(outcome.completion_tokens or 0)
        TOKENS.labels("cached").inc(outcome.cached_tokens or 0)


class Live(Collector):
    """Gauges read when Prometheus scrapes: documents in hand, documents queued per model
    (nothing until the drain is `attach`ed: the port is taken before the engine loads)."""

    def __init__(self):
        self.db: sa.Engine | None = None
        self.in_hand: Callable[[], int] = lambda: 0

    def attach(self, db: sa.Engine, in_hand: Callable[[], int]) -> None:
        self.db, self.in_hand = db, in_hand

    def collect(self):
        if self.db is None:
            return
        held = GaugeMetricFamily(
            "summarize_documents_in_flight", "Documents this worker holds (running or waiting)"
        )
        held.add_metric([], self.in_hand())
        yield held
        queued = GaugeMetricFamily(
            "summarize_queue_depth", "Documents queued in the database, by model", labels=["model"]
        )
        try:
            for model, count in queued_by_model(self.db).items():
                queued.add_metric([model], count)
        except sa.exc.SQLAlchemyError as exc:  # the database is away: no figure this time
            log.warning("metrics: could not count queued documents: %s", exc)
            return
        yield queued


def serve(host: str, port: int) -> Live:
    """Serve the metrics on host:port (a thread of prometheus_client's); returns the live
    gauges, to `attach` to the drain once it runs."""
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        raise SettingsError(
            f"SUMMARIZE_METRICS_PORT={port}: cannot serve metrics on {host}:{port} "
            f"({exc.strerror}): choose a free port, or unset it to serve none."
        ) from None
    live = Live()
    REGISTRY.register(live)
    log.info("metrics on http://%s:%d/metrics", host, port)
    return live
