#!/usr/bin/env bash
# Write docker/.env (or the file named by $1) from docker/.env.example with fresh secrets:
# the Fernet key, JWT and API secrets, the admin, Postgres and S3 passwords.
#
#   docker/make-env.sh [--local-images] [FILE]
#
# --local-images: point the stack at the images docker/local_images.py built (no
# registry): their tags from docker/.local-images.env (or $PITH_LOCAL_IMAGES_ENV); start with
# docker/compose.no-registry.yaml as well (docs/pages/docker.md).
# Never overwrites an existing file: secrets already in use must not change under a
# running deployment (the Fernet key decrypts stored Variables and Connections).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
images=""
if [ "${1:-}" = "--local-images" ]; then
  shift
  images="${PITH_LOCAL_IMAGES_ENV:-$here/.local-images.env}"
  if [ ! -s "$images" ]; then
    echo "make-env: $images is missing: build the images first (python3 docker/local_images.py)" >&2
    exit 1
  fi
fi
case "${1:-}" in -*) echo "make-env: unknown option $1 (usage: make-env.sh [--local-images] [FILE])" >&2; exit 2 ;; esac
out="${1:-$here/.env}"
if [ -e "$out" ]; then
  echo "make-env: $out exists; not replacing it (move it away first)" >&2
  exit 1
fi
python3 - "$here/.env.example" "$out" "$images" <<'PY'
import base64, os, secrets, sys

src, out, images = sys.argv[1], sys.argv[2], sys.argv[3]
fresh = {
    "AIRFLOW_FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
    "AIRFLOW_JWT_SECRET": secrets.token_urlsafe(48),
    "AIRFLOW_API_SECRET_KEY": secrets.token_urlsafe(48),
    "AIRFLOW_ADMIN_PASSWORD": secrets.token_urlsafe(18),
    "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
    "AWS_SECRET_ACCESS_KEY": secrets.token_urlsafe(32),
}
lines = []
for line in open(src, encoding="utf-8").read().splitlines():
    name = line.split("=", 1)[0]
    if not line.startswith("#") and name in fresh:
        line = f"{name}={fresh.pop(name)}"
    lines.append(line)
missing = sorted(fresh)
if missing:
    sys.exit(f"make-env: {src} lacks {', '.join(missing)}")
if images:
    tags = dict(
        ln.split("=", 1) for ln in open(images, encoding="utf-8").read().splitlines()
        if "=" in ln and not ln.startswith("#")
    )
    for i, line in enumerate(lines):
        name = line.split("=", 1)[0]
        if not line.startswith("#") and name in tags:
            lines[i] = f"{name}={tags.pop(name)}"
    lines += ["", "# images built by docker/local_images.py (no registry)"]
    lines += [f"{k}={v}" for k, v in tags.items()]
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
print(f"make-env: wrote {out} (mode 0600) with fresh secrets" + (" and the local images" if images else ""))
PY
