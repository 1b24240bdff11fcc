#!/bin/bash
# Creates `dashboards`, the read-only role Grafana logs in as (docs/dashboards.md).
#
# The official postgres image runs this once, from /docker-entrypoint-initdb.d, when it
# initializes an empty data directory, as POSTGRES_USER: the user summarize connects as,
# whose migrations later create the tables and views. So besides SELECT on what exists
# now, the role gets SELECT by default on every table and view that user creates later.
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
GRANT SELECT ON ALL TABLES IN SCHEMA public TO dashboards;
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO dashboards;
SQL
echo "Created the read-only role dashboards in database $database."
