"""Alembic environment: the metadata from `core.tables`, the URL from the settings object."""

from __future__ import annotations

from alembic import context
from sqlalchemy import pool

from core.database import connect
from core.settings import Settings
from core.tables import Base, modelled

config = context.config
target_metadata = Base.metadata


def _settings() -> Settings:
    settings = Settings.from_env()
    url = config.get_main_option("sqlalchemy.url")
    return settings.with_changes(database_url=url) if url else settings


def run_migrations_offline() -> None:
    context.configure(
        url=_settings().database_url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        include_object=modelled,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    db = connect(_settings(), poolclass=pool.NullPool)
    with db.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            include_object=modelled,
        )
        with context.begin_transaction():
            context.run_migrations()
    db.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
