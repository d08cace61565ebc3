#!/usr/bin/env bash
# First start: initdb with POSTGRES_USER/POSTGRES_PASSWORD, create POSTGRES_DB. Then serve.
# UTF8 as the official image: a minbase image has no locale, so initdb would choose SQL_ASCII,
# whose text SQLAlchemy receives as bytes (Celery's result backend then fails its version check).
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw="$(mktemp)"
  printf '%s' "$POSTGRES_PASSWORD" > "$pw"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != "postgres" ]; then createdb -U "$POSTGRES_USER" "$POSTGRES_DB"; fi
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
