"""How batches are doing, as `summarize status` and `summarize batches` say it.

Every figure is read from the `batch_stats` view, the one the dashboards and
Grafana read: its numbers come from rollups that triggers keep in step with the
rows (migration 0003), so a status costs the same at a hundred rows or a million.
Tokens and speed count only documents the batch generated itself.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime

import sqlalchemy as sa

from core.tables import STATUSES, Status, batches
from readers.terminal import printable
from readers.views import as_utc, batch_quality, batch_stats


@dataclass(frozen=True)
class BatchStatus:
    batch: str
    model: str
    created_at: datetime
    documents: int
    by_status: dict[str, int]
    deduplicated: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    first_started_at: datetime | None
    last_finished_at: datetime | None
    wall_s: float | None
    documents_per_s: float | None
    completion_tokens_per_s: float | None
    failure_rate: float | None
    p50_document_s: float | None
    p95_document_s: float | None
    quality: dict[str, float | int | None]  # the batch_quality view's figures (0006)
    settings: dict[str, object]  # instruction, max_tokens, max_sentences, prompt_hash
    metadata: dict[str, str] | None  # submit --meta

    @property
    def pending(self) -> int:
        return self.by_status.get(Status.QUEUED, 0) + self.by_status.get(Status.RUNNING, 0)

    @property
    def completed_at(self) -> datetime | None:
        """When the batch's last document finished, once none waits."""
        return None if self.pending else self.last_finished_at

    @property
    def request_counts(self) -> dict[str, int]:
        """As the hosted batch APIs count a batch's requests."""
        return {
            "total": self.documents,
            "completed": self.by_status[Status.SUCCEEDED],
            "failed": self.by_status[Status.FAILED],
            "cancelled": self.by_status[Status.CANCELLED],
            "expired": self.by_status[Status.EXPIRED],
        }

    def as_json(self) -> dict:
        data = asdict(self) | {
            "completed_at": self.completed_at,
            "request_counts": self.request_counts,
        }
        for key in ("created_at", "first_started_at", "last_finished_at", "completed_at"):
            data[key] = data[key].isoformat() if data[key] else None
        expires = data["settings"]["expires_at"]
        data["settings"]["expires_at"] = as_utc(expires).isoformat() if expires else None
        return data

    @classmethod
    def from_row(cls, row: sa.Row) -> BatchStatus:
        figures = {
            name: getattr(row, name) for name in cls.__dataclass_fields__ if name in row._fields
        }
        for name in ("created_at", "first_started_at", "last_finished_at"):
            figures[name] = as_utc(figures[name])
        quality = {name: getattr(row, f"q_{name}") for name in QUALITY}
        return cls(
            **figures,
            by_status={s: int(getattr(row, s)) for s in STATUSES},
            quality=quality,
            settings={name: getattr(row, f"s_{name}") for name in SETTINGS},
            metadata=json.loads(row.s_metadata) if row.s_metadata else None,
        )


QUALITY = [c.name for c in batch_quality.columns if c.name != "batch"]
SETTINGS = ("instruction", "max_tokens", "max_sentences", "prompt_hash", "expires_at")


def batch_status(db: sa.Engine, names: list[str]) -> list[BatchStatus]:
    """The status of each named batch that exists, in the order given."""
    if not names:
        return []
    query = (
        sa.select(
            batch_stats,
            *(batch_quality.c[n].label(f"q_{n}") for n in QUALITY),
            *(batches.c[n].label(f"s_{n}") for n in (*SETTINGS, "metadata")),
        )
        .join(batch_quality, batch_quality.c.batch == batch_stats.c.batch)
        .join(batches, batches.c.name == batch_stats.c.batch)
        .where(batch_stats.c.batch.in_(names))
    )
    with db.connect() as conn:
        found = conn.execute(query).all()
    by_name = {row.batch: BatchStatus.from_row(row) for row in found}
    return [by_name[name] for name in names if name in by_name]


def as_json(found: list[BatchStatus], workers: dict[str, dict] | None) -> str:
    """Batches as `status --json` and `batches --json` print them: figures, request counts,
    settings, metadata, and how many live workers run each one's model (null when Redis
    cannot say)."""
    served = serving(workers) if workers is not None else None
    rows = [
        s.as_json() | {"workers": served.get(s.model, 0) if served is not None else None}
        for s in found
    ]
    return json.dumps(rows, indent=2)


def serving(workers: dict[str, dict]) -> dict[str, int]:
    """Live workers per model, from their heartbeats (core/queue.live_workers)."""
    return Counter(str(about.get("model")) for about in workers.values())


def unserved(queued: dict[str, int], workers: dict[str, dict]) -> list[str]:
    """A line for each model whose documents wait with no live worker running it."""
    served = serving(workers)
    return [
        f"{count:,} {'document waits' if count == 1 else 'documents wait'} for model {model!r}, "
        "which no live worker serves: start one "
        f"with SUMMARIZE_MODEL={model} summarize worker"
        for model, count in sorted(queued.items())
        if count and not served.get(model)
    ]


def latest_batches(db: sa.Engine, limit: int = 5) -> list[str]:
    with db.connect() as conn:
        return list(
            conn.execute(
                sa.select(batches.c.name)
                .order_by(batches.c.created_at.desc(), batches.c.name.desc())
                .limit(limit)
            ).scalars()
        )


NO_BATCHES = "No batches yet: summarize submit PATH queues some."

# The columns `summarize status` and `summarize batches` print: (heading, alignment and width,
# the cell), so both tables are printed one way.
_COLUMNS = {
    "batch": ("batch", "<32", lambda s: printable(s.batch)[:32]),
    "created": ("created (UTC)", "<16", lambda s: f"{s.created_at:%Y-%m-%d %H:%M}"),
    "docs": ("docs", ">7", lambda s: f"{s.documents:,}"),
    "pending": ("pending", ">8", lambda s: f"{s.pending:,}"),
    **{
        status: (
            status,
            f">{max(7, len(status))}",
            lambda s, status=status: f"{s.by_status[status]:,}",
        )
        for status in STATUSES
    },
    "ended": ("ended", ">7", lambda s: f"{s.by_status['cancelled'] + s.by_status['expired']:,}"),
    "prompt tok": ("prompt tok", ">11", lambda s: f"{s.prompt_tokens:,}"),
    "output tok": ("output tok", ">11", lambda s: f"{s.completion_tokens:,}"),
    "docs/s": ("docs/s", ">7", lambda s: f"{s.documents_per_s:.2f}" if s.documents_per_s else "-"),
    "looped": ("looped", ">7", lambda s: f"{s.quality['looped']:,}"),
    "cut": ("cut", ">7", lambda s: f"{s.quality['truncated']:,}"),
    "flawed": ("flawed", ">7", lambda s: f"{s.quality['flawed']:,}"),
    "meta": ("meta", "<30", lambda s: _pairs(s.metadata)),
}


def _pairs(metadata: dict | None, width: int = 30) -> str:
    text = printable(" ".join(f"{k}={v}" for k, v in (metadata or {}).items()))
    return text if len(text) <= width else text[: width - 1] + "…"


STATUS_TABLE = (
    "batch",
    "docs",
    "queued",
    "running",
    "succeeded",
    "failed",
    "ended",
    "prompt tok",
    "output tok",
    "docs/s",
    "looped",
    "cut",
    "flawed",
)
BATCHES_TABLE = (
    "batch",
    "created",
    "docs",
    "pending",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "meta",
)


def table(found: list[BatchStatus], columns: tuple[str, ...]) -> str:
    """The batches as a table of these columns, a heading line first."""
    if not found:
        return NO_BATCHES
    lines = [" ".join(f"{_COLUMNS[c][0]:{_COLUMNS[c][1]}}" for c in columns)]
    for s in found:
        lines.append(" ".join(f"{_COLUMNS[c][2](s):{_COLUMNS[c][1]}}" for c in columns))
    return "\n".join(lines)
