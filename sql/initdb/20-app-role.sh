#!/bin/sh
# Runs once, when the image initialises an empty data directory: the run-time login role that
# ENGRAM_DATABASE_URL uses. `engram migrate` (as the owner) grants it what it needs.
set -eu
if [ -z "${ENGRAM_APP_PASSWORD:-}" ]; then
  echo "ENGRAM_APP_PASSWORD is not set: not creating the engram_app login role" >&2
  exit 0
fi
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  --set=password="$ENGRAM_APP_PASSWORD" <<'SQL'
CREATE ROLE engram_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE PASSWORD :'password';
SQL
