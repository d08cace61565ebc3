#!/usr/bin/env bash
# CI stand-in for the official image's /entrypoint: the parts the pith stack uses.
# With _AIRFLOW_DB_MIGRATE set: wait for the metadata DB, then migrate it. Then run
# bash/python as given, or anything else as an `airflow` subcommand.
set -euo pipefail
if [ -n "${_AIRFLOW_DB_MIGRATE:-}" ]; then
  for _ in $(seq 1 60); do
    if airflow db check >/dev/null 2>&1; then break; fi
    sleep 2
  done
  airflow db migrate
fi
case "${1:-}" in
  bash|python|python3) exec "$@" ;;
  airflow) shift; exec airflow "$@" ;;
  "") exec airflow version ;;
  *) exec airflow "$@" ;;
esac
