"""Grafana's provisioning files and the read-only `dashboards` role, against the real PostgreSQL.

Grafana itself does not run here: the dashboard's SQL is run the way Grafana would
(its time macros expanded), logged in as the role the init script creates.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import make_url

from core import database
from tests.batches import make_week

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "summarize.json"
ROLE_SCRIPT = DEPLOY / "postgres" / "init" / "10-dashboards-role.sh"
VIEWS = {"batch_stats", "daily_stats", "failures", "batch_quality", "flagged"}

only_postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def queries() -> list[tuple[str, str]]:
    """(panel title, rawSql) of every SQL query of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [
        (p["title"], t["rawSql"]) for p in panels for t in p.get("targets", ()) if "rawSql" in t
    ]


def prometheus_metrics() -> set[str]:
    """The metric names the dashboard's Prometheus panels query."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p.get("targets", ()) if "expr" in t]
    return {name for e in exprs for name in re.findall(r"\b((?:summarize_|vllm:)[\w:]+)", e)}


def relations(sql: str) -> set[str]:
    """The tables and views a query reads: the names after FROM and JOIN."""
    return {name.lower() for name in re.findall(r"\b(?:FROM|JOIN)\s+([A-Za-z_]\w*)", sql, re.I)}


def as_grafana_sends_it(sql: str) -> str:
    """Expand the time macros as Grafana's PostgreSQL data source does, for a wide range."""
    start, end = "'2000-01-01T00:00:00Z'", "'2100-01-01T00:00:00Z'"
    sql = re.sub(r"\$__timeFilter\(([^)]+)\)", rf"\1 BETWEEN {start} AND {end}", sql)
    sql = sql.replace("$__timeFrom()", start).replace("$__timeTo()", end)
    assert "$" not in sql, f"a macro this test does not expand: {sql}"
    return sql


@pytest.fixture
def dashboards_role(database_url):
    """The init script run as the postgres image runs it: on the empty database, before the
    migrations. The role is dropped again afterwards (roles belong to the whole server)."""
    yield make_role(database_url)
    engine = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP OWNED BY dashboards"))
        conn.execute(sa.text("DROP ROLE dashboards"))
    engine.dispose()


def make_role(database_url: str) -> str:
    """Run the init script; returns the role's URL."""
    url = make_url(database_url)
    env = os.environ | {
        "POSTGRES_USER": url.username,
        "POSTGRES_DB": url.database,
        "DASHBOARDS_PASSWORD": "s3cret$with'quote",
        "PGHOST": url.host,
        "PGPORT": str(url.port or 5432),
    }
    done = subprocess.run(
        ["bash", str(ROLE_SCRIPT)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return url.set(username="dashboards").render_as_string(hide_password=False)


def assert_reads_results_and_views_but_no_texts(role_url: str) -> None:
    grafana = sa.create_engine(role_url, poolclass=sa.pool.NullPool)
    with grafana.connect() as conn:
        conn.execute(sa.text("SELECT summary, source_path FROM results")).all()
        for view in VIEWS:
            conn.execute(sa.text(f"SELECT * FROM {view}")).all()
    with grafana.connect() as conn, pytest.raises(sa.exc.DBAPIError, match="permission denied"):
        conn.execute(sa.text("SELECT body FROM documents"))
    grafana.dispose()


@only_postgresql
def test_every_dashboard_query_reads_only_the_views_that_the_migrations_create(settings):
    database.upgrade(settings)
    engine = database.connect(settings)
    inspector = sa.inspect(engine)
    existing = set(inspector.get_view_names()) | set(inspector.get_table_names())
    engine.dispose()

    read = {name for _, sql in queries() for name in relations(sql)}
    assert read <= existing
    assert read == VIEWS  # the dashboard reads the views only, never the tables behind them
    assert len(queries()) >= 8


def test_every_panel_uses_the_provisioned_data_source():
    dashboard = json.loads(DASHBOARD.read_text())
    source, prometheus = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/summarize.yml").read_text()
    )["datasources"]
    provider = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/summarize.yml").read_text()
    )["providers"][0]

    assert (source["name"], source["url"], source["user"]) == (
        "summarize",
        "postgres:5432",
        "dashboards",
    )
    assert source["secureJsonData"] == {"password": "$DASHBOARDS_PASSWORD"}
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert (prometheus["type"], prometheus["url"]) == ("prometheus", "http://prometheus:9090")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    refs = [(p["datasource"], t) for p in panels for t in p["targets"]]
    for panel, target in refs:
        assert target["datasource"] == panel
        assert (panel["type"], panel["uid"]) == (
            (source["type"], source["uid"]) if "rawSql" in target else ("prometheus", "prometheus")
        )
    assert {(p["type"], p["uid"]) for p, _ in refs} == {
        (source["type"], source["uid"]),
        (prometheus["type"], prometheus["uid"]),
    }


def test_the_prometheus_panels_read_the_workers_metrics():
    """Each summarize_* metric a panel queries is one worker/metrics.py defines; the vllm:*
    ones are checked against a real worker's scrape in tests/test_pipeline.py."""
    from prometheus_client import REGISTRY

    import worker.metrics  # noqa: F401 - registers the counters

    ours = {m for m in prometheus_metrics() if m.startswith("summarize_")}
    served = {f.name + ("_total" if f.type == "counter" else "") for f in REGISTRY.collect()}
    served |= {"summarize_queue_depth", "summarize_documents_in_flight"}  # read at each scrape
    assert ours and ours <= served, ours - served
    assert {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    } <= prometheus_metrics()


@only_postgresql
def test_the_dashboards_role_runs_every_query_and_can_write_nothing(
    dashboards_role, settings, tmp_path
):
    db = database.connect(settings)
    database.ensure_schema(settings, db)  # after the role: the migrations' views are new
    make_week(settings, db, tmp_path)
    grafana = sa.create_engine(dashboards_role, poolclass=sa.pool.NullPool)

    with grafana.connect() as conn:
        answered = {
            title: conn.execute(sa.text(as_grafana_sends_it(sql))).all() for title, sql in queries()
        }
        assert answered["Documents finished"] == [(21,)]
        assert answered["Failed documents"] == [(2,)]
        assert [row.batch for row in answered["Batches"]] == ["tuesday", "monday"]
        quality = {row.batch: row for row in answered["Summary quality"]}
        assert (quality["tuesday"].summaries, quality["tuesday"].looped) == (14, 0)
        assert len(answered["Flagged summaries"]) == 19  # `summary of N tokens`: N is new
        assert conn.execute(sa.text("SHOW default_transaction_read_only")).scalar() == "on"
    with grafana.connect() as conn, pytest.raises(sa.exc.DBAPIError, match="read-only"):
        conn.execute(sa.text("DELETE FROM results"))
    with grafana.connect() as conn:  # the session setting is the role's to change, but then:
        conn.execute(sa.text("SET default_transaction_read_only = off"))
        conn.commit()
        with pytest.raises(sa.exc.DBAPIError, match="permission denied for table results"):
            conn.execute(sa.text("DELETE FROM results"))
        conn.rollback()
        with pytest.raises(sa.exc.DBAPIError, match="permission denied for schema public"):
            conn.execute(sa.text("CREATE TABLE mine (id integer)"))
    grafana.dispose()
    assert_reads_results_and_views_but_no_texts(dashboards_role)
    with db.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM results")).scalar() == 21
    db.dispose()


@only_postgresql
def test_a_role_made_after_the_tables_gets_the_same_grants(settings, database_url):
    db = database.connect(settings)
    database.ensure_schema(settings, db)
    try:
        assert_reads_results_and_views_but_no_texts(make_role(database_url))
    finally:
        with db.begin() as conn:
            conn.execute(sa.text("DROP OWNED BY dashboards"))
            conn.execute(sa.text("DROP ROLE dashboards"))
        db.dispose()
