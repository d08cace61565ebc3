#!/usr/bin/env bash
# One-off setup of the compose stack (the `airflow-init` service; safe to run again).
#
# As root: give the keys, auth and logs volumes to AIRFLOW_UID:0 (every other service
# runs as that user, and the signing key must be readable by it and by no one else).
# Then, as AIRFLOW_UID: refuse weak secrets, create the local bucket, keep or create
# the signing key (never replacing the store's key: see pith_init.py), write the UI
# password file; finally the image's own /entrypoint waits for the database, migrates
# it (_AIRFLOW_DB_MIGRATE) and creates the arXiv pool.
set -euo pipefail

uid="${AIRFLOW_UID:-50000}"
if [ "$(id -u)" = "0" ]; then
  signer_dir=""
  case "${PITH_SIGNER:-}" in
    file:/*|kms-envelope:/*) path="${PITH_SIGNER#*:}"; signer_dir="$(dirname "$path")" ;;
  esac
  python3 /opt/pith/pith_init.py own "$uid" /opt/pith/keys /opt/pith/auth /opt/airflow/logs ${signer_dir:+"$signer_dir"}
  exec python3 /opt/pith/pith_init.py run-as "$uid" -- /bin/bash "$0" "$@"
fi

python3 /opt/pith/pith_init.py prepare
# All arXiv requests share one slot: arXiv asks for one connection at a time.
exec /entrypoint airflow pools set arxiv_oai 1 "arXiv OAI-PMH: one request at a time"
