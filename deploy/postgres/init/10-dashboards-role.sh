#!/bin/bash
# Creates `dashboards`, the read-only role Grafana logs in as (docs/dashboards.md).
#
# The official postgres image runs this once, from /docker-entrypoint-initdb.d, when it
# initializes an empty data directory, as POSTGRES_USER: the user summarize connects as,
# whose migrations later create the tables and views and grant the role SELECT on `results`,
# `batches` and the dashboard views: never on `documents` (the texts). Run after the tables
# exist, this script grants the same at once, through the migrations' grant_dashboards().
# It can read; it cannot write, and its sessions are read-only even if granted more.
#
# Run by hand against an existing database (PGHOST etc. as for psql):
#   POSTGRES_USER=summarize POSTGRES_DB=summarize DASHBOARDS_PASSWORD=… \
#     bash deploy/postgres/init/10-dashboards-role.sh
set -euo pipefail

: "${DASHBOARDS_PASSWORD:?set DASHBOARDS_PASSWORD to the password of the read-only dashboards role}"
owner="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$owner}"

# The password reaches psql through its environment (\getenv), not its command line.
psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet --username "$owner" --dbname "$database" \
    -v owner="$owner" -v database="$database" <<'SQL'
\getenv password DASHBOARDS_PASSWORD
SELECT 'CREATE ROLE dashboards' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dashboards')
\gexec
ALTER ROLE dashboards WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    PASSWORD :'password';
ALTER ROLE dashboards SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE :"database" TO dashboards;
GRANT USAGE ON SCHEMA public TO dashboards;
SELECT 'SELECT public.grant_dashboards()' WHERE to_regprocedure('public.grant_dashboards()') IS NOT NULL
\gexec
SQL
echo "Created the read-only role dashboards in database $database."
