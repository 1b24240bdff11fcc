"""The API's keys: made once and shown once, kept as a SHA-256 hash, revoked by name.

A key is `sk-summarize-` and 32 random bytes in URL-safe base64; its hash is all the
database holds, so a copy of the database gives no key. Every call of the API names its
key (`Authorization: Bearer KEY`), and sees and changes only what that key made. A key made
with `dashboard` opens `summarize dashboard` as well, which shows every batch.
"""

from __future__ import annotations

import hashlib
import re
import secrets

import sqlalchemy as sa

from core.errors import SummarizeError
from core.tables import api_keys, utcnow

PREFIX = "sk-summarize-"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def create(db: sa.Engine, name: str, *, dashboard: bool = False) -> str:
    """A new key named `name` (one that opens the dashboard too, with `dashboard`); the key
    itself is returned, never stored."""
    if not NAME.fullmatch(name):
        raise SummarizeError(
            f"{name!r} cannot name a key: use letters, digits, '.', '_' or '-' (up to 100), "
            "starting with a letter or digit."
        )
    key = PREFIX + secrets.token_urlsafe(32)
    with db.begin() as conn:
        if conn.execute(sa.select(api_keys.c.name).where(api_keys.c.name == name)).first():
            raise SummarizeError(
                f"A key named {name!r} exists already: revoke it first "
                f"(summarize keys revoke {name}), or choose another name."
            )
        conn.execute(
            api_keys.insert().values(
                name=name, key_hash=digest(key), created_at=utcnow(), dashboard=dashboard
            )
        )
    return key


def revoke(db: sa.Engine, name: str) -> None:
    """The key named `name` stops working at once; its files and batches stay."""
    with db.begin() as conn:
        done = conn.execute(
            api_keys.update()
            .where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
    if not done.rowcount:
        raise SummarizeError(f"No live key is named {name!r}: summarize keys list shows them.")


def listed(db: sa.Engine) -> list[sa.Row]:
    """Every key's name, when it was made, when it was revoked (None: live), and whether it
    opens the dashboard."""
    columns = (api_keys.c.name, api_keys.c.created_at, api_keys.c.revoked_at, api_keys.c.dashboard)
    with db.connect() as conn:
        return list(conn.execute(sa.select(*columns).order_by(api_keys.c.name)))


def owner(db: sa.Engine, key: str, *, dashboard: bool = False) -> str | None:
    """The name of the live key `key` (one that opens the dashboard, with `dashboard`), or
    None."""
    with db.connect() as conn:
        return conn.execute(_live(dashboard).where(api_keys.c.key_hash == digest(key))).scalar()


def any_live(db: sa.Engine, *, dashboard: bool = False) -> bool:
    """Whether a key is live (one that opens the dashboard, with `dashboard`)."""
    with db.connect() as conn:
        return bool(conn.execute(_live(dashboard).limit(1)).first())


def _live(dashboard: bool) -> sa.Select:
    """The names of the live keys (those that open the dashboard, with `dashboard`)."""
    query = sa.select(api_keys.c.name).where(api_keys.c.revoked_at.is_(None))
    return query.where(api_keys.c.dashboard.is_(True)) if dashboard else query
