"""How batches are doing: counts per status, tokens spent, and speed, read from `results`.

Tokens and speed count only documents this batch generated: a deduplicated row
carries the earlier summary's token counts but cost nothing now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import sqlalchemy as sa

from jobs.models import STATUSES, batches, results


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
    generated: int  # rows this batch summarized itself (succeeded, not deduplicated)

    @property
    def wall_s(self) -> float | None:
        if self.first_started_at is None or self.last_finished_at is None:
            return None
        return max((self.last_finished_at - self.first_started_at).total_seconds(), 0.0)

    @property
    def documents_per_s(self) -> float | None:
        wall = self.wall_s
        return self.generated / wall if wall else None

    @property
    def completion_tokens_per_s(self) -> float | None:
        wall = self.wall_s
        return self.completion_tokens / wall if wall else None

    @property
    def pending(self) -> int:
        return self.by_status.get("queued", 0) + self.by_status.get("running", 0)

    def as_json(self) -> dict:
        data = asdict(self)
        for key in ("created_at", "first_started_at", "last_finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        data.update(
            wall_s=self.wall_s,
            documents_per_s=self.documents_per_s,
            completion_tokens_per_s=self.completion_tokens_per_s,
        )
        return data


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=timezone.utc)


def batch_status(engine: sa.Engine, names: list[str]) -> list[BatchStatus]:
    """The status of each named batch that exists, in the order given."""
    if not names:
        return []
    generated = sa.and_(results.c.status == "succeeded", sa.not_(results.c.deduplicated))
    spent = sa.not_(results.c.deduplicated)

    def total(column: sa.Column) -> sa.ColumnElement:
        return sa.func.coalesce(sa.func.sum(sa.case((spent, column), else_=0)), 0)

    query = (
        sa.select(
            results.c.batch,
            *(
                sa.func.sum(sa.case((results.c.status == status, 1), else_=0)).label(status)
                for status in STATUSES
            ),
            sa.func.count().label("documents"),
            sa.func.sum(sa.case((results.c.deduplicated, 1), else_=0)).label("deduplicated"),
            total(results.c.prompt_tokens).label("prompt_tokens"),
            total(results.c.completion_tokens).label("completion_tokens"),
            total(results.c.cached_tokens).label("cached_tokens"),
            sa.func.min(sa.case((spent, results.c.started_at))).label("first_started_at"),
            sa.func.max(sa.case((spent, results.c.finished_at))).label("last_finished_at"),
            sa.func.sum(sa.case((generated, 1), else_=0)).label("generated"),
        )
        .where(results.c.batch.in_(names))
        .group_by(results.c.batch)
    )
    with engine.connect() as conn:
        info = {
            row.name: row
            for row in conn.execute(
                sa.select(batches.c.name, batches.c.model, batches.c.created_at).where(
                    batches.c.name.in_(names)
                )
            )
        }
        counts = {row.batch: row for row in conn.execute(query)}
    statuses = []
    for name in names:
        if name not in info:
            continue
        row = counts.get(name)
        statuses.append(
            BatchStatus(
                batch=name,
                model=info[name].model,
                created_at=_utc(info[name].created_at),
                documents=row.documents if row else 0,
                by_status={s: int(getattr(row, s) or 0) if row else 0 for s in STATUSES},
                deduplicated=int(row.deduplicated or 0) if row else 0,
                prompt_tokens=int(row.prompt_tokens) if row else 0,
                completion_tokens=int(row.completion_tokens) if row else 0,
                cached_tokens=int(row.cached_tokens) if row else 0,
                first_started_at=_utc(_parse(row.first_started_at)) if row else None,
                last_finished_at=_utc(_parse(row.last_finished_at)) if row else None,
                generated=int(row.generated or 0) if row else 0,
            )
        )
    return statuses


def _parse(value: datetime | str | None) -> datetime | None:
    """SQLite hands back aggregated timestamps as text; PostgreSQL as datetimes."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


def latest_batches(engine: sa.Engine, limit: int = 5) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(batches.c.name)
                .order_by(batches.c.created_at.desc(), batches.c.name.desc())
                .limit(limit)
            ).scalars()
        )
