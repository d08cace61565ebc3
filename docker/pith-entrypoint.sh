#!/usr/bin/env bash
# Entry point of the pith Airflow image: drop AWS settings that docker/.env sets to
# the empty string, then hand over to Airflow's own /entrypoint.
#
# Why: compose cannot leave a variable out by configuration, only set it. For real
# AWS, .env sets AWS_ENDPOINT_URL_S3= and AWS_ACCESS_KEY_ID= (empty); botocore must
# then see them as absent so it uses AWS's endpoints and the instance/IAM role.
set -euo pipefail
for var in AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_ENDPOINT_URL_KMS AWS_ACCESS_KEY_ID \
           AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_REGION AWS_REGION; do
  if [ -z "${!var-}" ]; then unset "$var"; fi
done
exec "${PITH_NEXT_ENTRYPOINT:-/entrypoint}" "$@"
