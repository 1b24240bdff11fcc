"""The schema is a contract: migrations build exactly the columns the docs document."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from core import database
from core.tables import Base, modelled
from readers.views import VIEWS

RESULTS_COLUMNS = [
    "id",
    "batch",
    "source_path",
    "content_hash",
    "result_key",
    "status",
    "summary",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "parts",
    "finish_reason",
    "model",
    "prompt_hash",
    "attempts",
    "error",
    "deduplicated",
    "created_at",
    "started_at",
    "finished_at",
    "claimed_by",
    "lease_until",
    "repetition",
    "copied",
    "novel_numbers",
    "compression",
    "looped",
    "doc_id",
    "metadata",
    "flaw",
]
DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_an_empty_database_is_upgraded_to_exactly_the_documented_columns(settings):
    db = database.connect(settings)
    assert database.current_revision(db) is None

    database.upgrade(settings)

    inspector = sa.inspect(db)
    assert [c["name"] for c in inspector.get_columns("results")] == RESULTS_COLUMNS
    assert set(inspector.get_table_names()) >= {
        "results",
        "documents",
        "batches",
        "alembic_version",
    }
    assert database.current_revision(db) == database.SCHEMA_REVISION
    uniques = {u["name"]: u["column_names"] for u in inspector.get_unique_constraints("results")}
    assert uniques == {"uq_results_batch_source_path": ["batch", "source_path"]}
    db.dispose()


@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")
def test_the_migrations_match_the_models(settings):
    """Autogenerate finds nothing to add: models and migrations describe the same schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    database.upgrade(settings)
    db = database.connect(settings)
    with db.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": modelled})
        diff = compare_metadata(context, Base.metadata)
    db.dispose()
    assert diff == []


def test_the_code_expects_the_newest_migration(settings):
    script = ScriptDirectory.from_config(database.alembic_config(settings))
    assert script.get_current_head() == database.SCHEMA_REVISION


def test_every_column_of_results_is_documented():
    text = (DOCS / "results.md").read_text()
    table = text[text.index("## The `results` table") :]
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert documented[: len(RESULTS_COLUMNS)] == RESULTS_COLUMNS


def test_ensure_schema_upgrades_once_and_then_does_nothing(settings):
    db = database.connect(settings)
    database.ensure_schema(settings, db)
    database.ensure_schema(settings, db)
    assert database.current_revision(db) == database.SCHEMA_REVISION
    db.dispose()


def test_every_column_of_the_dashboard_views_is_documented(settings):
    database.upgrade(settings)
    db = database.connect(settings)
    text = (DOCS / "dashboards.md").read_text()
    for view in VIEWS:
        with db.connect() as conn:
            columns = list(conn.execute(sa.text(f"SELECT * FROM {view} LIMIT 0")).keys())
        section = text[text.index(f"### The `{view}` view") :]
        section = section[: section.index("\n#", 1)] if "\n#" in section[1:] else section
        documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
        assert documented == columns, view
    db.dispose()
