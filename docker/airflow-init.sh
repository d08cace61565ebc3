#!/usr/bin/env bash
# One-off setup for the compose stack: metadata DB, the arXiv pool, an admin, and a
# signing key envelope wrapped by the local KMS (moto). Safe to run again.
set -euo pipefail

airflow db migrate
# All arXiv requests share one slot: arXiv asks for one connection at a time.
airflow pools set arxiv_oai 1 "arXiv OAI-PMH: one request at a time"

envelope="${PITH_ENVELOPE_PATH:-/opt/pith/keys/pith.envelope.json}"
if [ ! -f "$envelope" ]; then
  mkdir -p "$(dirname "$envelope")"
  python - <<'PY'
import os
import boto3

kms = boto3.client("kms")
alias = os.environ.get("PITH_KMS_ALIAS", "alias/pith-wrap")
if not any(a["AliasName"] == alias for a in kms.list_aliases()["Aliases"]):
    key = kms.create_key(Description="pith-pipeline envelope wrapping key (local)")
    kms.create_alias(AliasName=alias, TargetKeyId=key["KeyMetadata"]["KeyId"])
PY
  pith-pipeline keys envelope-create --kms-key "${PITH_KMS_ALIAS:-alias/pith-wrap}" \
      --out "$envelope"
fi
echo "airflow-init: done (signer kms-envelope:$envelope)"
