"""The pith part of the compose stack's `airflow-init`: refuse weak secrets, create the
local bucket, and make sure the stack signs with the registry's key, never a new one.

Run by docker/airflow-init.sh inside the Airflow image:

    pith_init.py own UID PATH...      (as root) make PATHs belong to UID:0, keys 0600
    pith_init.py prepare              (as UID)  secrets, bucket, signing key, UI password
    pith_init.py run-as UID -- CMD... (as root) exec CMD as UID:0 (no setpriv/gosu needed)

Why the signing key gets this much care: a registry's readers pin its key. A stack
that quietly makes a new key after a lost volume or a moved path publishes bundles
nobody can verify against the key they trust. So a missing key is created only when
the store has never been signed; when the store is already signed by another key,
init stops and says how to restore or rotate deliberately.

Messages name settings and paths, never secret values.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The .env variable behind each Airflow secret (messages name what the operator edits).
SECRETS = {
    "AIRFLOW__CORE__FERNET_KEY": "AIRFLOW_FERNET_KEY",
    "AIRFLOW__API_AUTH__JWT_SECRET": "AIRFLOW_JWT_SECRET",
    "AIRFLOW__API__SECRET_KEY": "AIRFLOW_API_SECRET_KEY",
    "PITH_ADMIN_PASSWORD": "AIRFLOW_ADMIN_PASSWORD",
}
MIN_SECRET_CHARS = 32
MIN_PASSWORD_CHARS = 12
PLACEHOLDER_MARKERS = ("change-me", "changeme", "placeholder", "secret-here")
PUBLIC_KEY_FILE = "pith-signing-key.json"
ALLOW_NEW_KEY_ENV = "PITH_ALLOW_NEW_SIGNING_KEY"


class InitError(Exception):
    """A condition the operator must fix; the message is printed as one line."""


# ------------------------------------------------------------------ secrets
def secret_problems(env: Mapping[str, str]) -> list[str]:
    """Every weak, missing or placeholder secret, by its .env name (never its value)."""
    problems = []
    for var, env_name in SECRETS.items():
        value = env.get(var, "")
        if not value:
            problems.append(f"{env_name} is empty")
            continue
        if any(m in value.lower() for m in PLACEHOLDER_MARKERS):
            problems.append(f"{env_name} is still the placeholder")
            continue
        if var == "AIRFLOW__CORE__FERNET_KEY":
            try:
                raw = base64.urlsafe_b64decode(value.encode("ascii"))
            except (binascii.Error, ValueError, UnicodeEncodeError):
                raw = b""
            if len(raw) != 32:
                problems.append(f"{env_name} is not a Fernet key (url-safe base64 of 32 bytes)")
        elif var == "PITH_ADMIN_PASSWORD":
            if len(value) < MIN_PASSWORD_CHARS:
                problems.append(f"{env_name} is shorter than {MIN_PASSWORD_CHARS} characters")
        elif len(value) < MIN_SECRET_CHARS:
            problems.append(f"{env_name} is shorter than {MIN_SECRET_CHARS} characters")
    return problems


def check_secrets(env: Mapping[str, str]) -> None:
    problems = secret_problems(env)
    if problems:
        raise InitError(
            "refusing to start with weak secrets: "
            + "; ".join(problems)
            + " (docker/make-env.sh writes a docker/.env with fresh ones)"
        )


def write_passwords_file(path: Path, user: str, password: str) -> None:
    """Airflow's simple auth manager reads `{user: password}` from this file (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps({user: password}).encode())
    finally:
        os.close(fd)
    tmp.replace(path)


# ------------------------------------------------------------------- bucket
def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InitError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value < 0:
        raise InitError(f"{name} must be a number of seconds >= 0, not {raw!r}")
    return value


def ensure_bucket(store: str, env: Mapping[str, str]) -> str:
    """Create the store's bucket on the local S3 stand-in; on AWS only report.

    The bucket is taken from PITH_STORE, so the two can't disagree. On real AWS
    (no AWS_ENDPOINT_URL_S3) buckets are infrastructure: init never creates one.
    """
    if not store.startswith("s3://"):
        return f"store {store} (not S3: nothing to create)"
    bucket = store[len("s3://") :].split("/", 1)[0]
    if not env.get("AWS_ENDPOINT_URL_S3") and not env.get("AWS_ENDPOINT_URL"):
        return f"store {store} (AWS: bucket {bucket} must already exist)"
    import boto3
    from botocore.exceptions import ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    s3 = boto3.client("s3")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    # `docker compose restart` restarts every container at once, ignoring depends_on:
    # the S3 service may still be starting. Wait for it rather than fail the stack.
    wait = _seconds(env, "PITH_INIT_S3_WAIT", 120)
    deadline = time.monotonic() + wait
    while True:
        try:
            s3.head_bucket(Bucket=bucket)
            return f"store {store} (bucket {bucket} exists)"
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code not in ("404", "NoSuchBucket", "NotFound"):
                raise InitError(f"cannot use bucket {bucket} on the local S3 endpoint ({code})") from None
            break
        except (BotoConnectionError, HTTPClientError):
            if time.monotonic() >= deadline:
                raise InitError(
                    f"the local S3 endpoint {endpoint} did not answer within {wait:g}s "
                    "(is the s3 service up? PITH_INIT_S3_WAIT sets the wait)"
                ) from None
            _pause(2.0)
    s3.create_bucket(Bucket=bucket)
    # keep every overwritten or deleted object recoverable where the stand-in can
    with contextlib.suppress(ClientError):
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return f"store {store} (bucket {bucket} created)"


# -------------------------------------------------------------- signing key
@dataclass(frozen=True)
class KeyInfo:
    key_id: str
    public_hex: str


def signer_file(spec: str) -> tuple[str, Path | None]:
    """The signer scheme and, for file-based signers, the file init looks after."""
    scheme, _, rest = spec.partition(":")
    if scheme == "file" and rest:
        return "file", Path(rest)
    if scheme == "kms-envelope" and rest and "://" not in rest:
        return "kms-envelope", Path(rest)
    if scheme == "kms-envelope" and rest.startswith("file://"):
        return "kms-envelope", Path(rest[len("file://") :])
    if ":" not in spec and spec:
        return "file", Path(spec)
    return scheme, None


def published_keys(store: str) -> list[KeyInfo]:
    """The keys the store's pith-signing-key.json lists ([] when it was never signed)."""
    from pith_pipeline.core.keys import read_key_document
    from pith_pipeline.storage.factory import open_store

    data = open_store(store).get(PUBLIC_KEY_FILE)
    if data is None:
        return []
    return [
        KeyInfo(k.key_id, k.public_key.hex()) for k in read_key_document(data, f"{store}/{PUBLIC_KEY_FILE}")
    ]


def local_key(scheme: str, path: Path) -> KeyInfo:
    """The public half of the key file or envelope at `path` (no KMS call needed)."""
    if scheme == "file":
        from pith_pipeline.signing.local import load_signer

        signer = load_signer(path)
        return KeyInfo(signer.key_id, signer.public_key.hex())
    from pith_pipeline.signing.envelope import parse_envelope

    env = parse_envelope(path.read_bytes(), str(path))
    return KeyInfo(str(env["key_id"]), str(env["public_key_hex"]))


def _names(keys: Sequence[KeyInfo]) -> str:
    return ", ".join(k.key_id for k in keys)


def ensure_signing_key(env: Mapping[str, str]) -> str:
    """Keep, check or (only for a never-signed store) create the stack's signing key."""
    spec = env.get("PITH_SIGNER", "")
    store = env.get("PITH_STORE", "")
    if not spec:
        raise InitError("PITH_SIGNER is empty (docker/.env.example shows the choices)")
    scheme, path = signer_file(spec)
    if path is None:
        return f"signer {scheme}: (kept outside this stack; nothing to create)"
    published = published_keys(store) if store else []
    if path.exists():
        mine = local_key(scheme, path)
        if published and mine.public_hex not in {k.public_hex for k in published}:
            raise InitError(
                f"the signing key in {path} ({mine.key_id}) is not a key of {store}, which is signed by "
                f"{_names(published)}; restore the right key, or make this one the store's key on "
                "purpose with: pith-pipeline keys rotate"
            )
        return f"signer {scheme}:{path} kept (key {mine.key_id})"
    if published and env.get(ALLOW_NEW_KEY_ENV, "") != "1":
        raise InitError(
            f"{path} is missing but {store} is already signed by {_names(published)}: refusing to make a "
            "new signing key. Restore the key (the keys volume, or PITH_SIGNER pointing at it); to start "
            f"a new key deliberately set {ALLOW_NEW_KEY_ENV}=1 once, then run pith-pipeline keys rotate"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    if scheme == "file":
        from pith_pipeline.signing.local import PRIVATE_KEY_FILE, generate_key

        if path.name != PRIVATE_KEY_FILE:
            raise InitError(f"PITH_SIGNER file keys are created as .../{PRIVATE_KEY_FILE}, not {path.name}")
        _, _, doc = generate_key(path.parent, base_url=env.get("PITH_BASE_URL", ""))
        made = doc.key_id
    else:
        from pith_pipeline.signing.envelope import create_envelope, write_envelope

        wrap = env.get("PITH_KMS_ALIAS", "")
        if not wrap:
            raise InitError("PITH_KMS_ALIAS is empty: name the KMS key that wraps the envelope")
        envelope = create_envelope(wrap, region=env.get("AWS_DEFAULT_REGION") or None)
        write_envelope(path, envelope)
        made = str(envelope["key_id"])
    return f"signer {scheme}:{path} created (key {made})"


# -------------------------------------------------------------- ownership
def own(uid: int, paths: Sequence[Path]) -> None:
    """Make PATHs (recursively) belong to uid:0; key files 0600, key dirs 0700."""
    for top in paths:
        top.mkdir(parents=True, exist_ok=True)
        for root, dirs, files in os.walk(top):
            os.chown(root, uid, 0)
            for d in dirs:
                os.chown(os.path.join(root, d), uid, 0)
            for f in files:
                os.chown(os.path.join(root, f), uid, 0)
        if top.name in ("keys", "auth"):
            top.chmod(0o700)
            for f in top.rglob("*"):
                if f.is_file() and f.suffix == ".json" and f.name != PUBLIC_KEY_FILE:
                    f.chmod(0o600)


def run_as(uid: int, argv: Sequence[str]) -> None:
    """exec argv as uid:0 with no supplementary groups (Airflow's image convention)."""
    os.setgroups([])
    os.setgid(0)
    os.setuid(uid)
    home = os.environ.get("PITH_INIT_HOME", "/home/airflow")
    os.environ["HOME"] = home if os.access(home, os.W_OK) else "/tmp"
    os.execvp(argv[0], list(argv))


def prepare(env: Mapping[str, str]) -> list[str]:
    check_secrets(env)
    lines = [ensure_bucket(env.get("PITH_STORE", ""), env), ensure_signing_key(env)]
    pw_file = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", "")
    if pw_file:
        user = env.get("PITH_ADMIN_USER", "admin")
        write_passwords_file(Path(pw_file), user, env["PITH_ADMIN_PASSWORD"])
        lines.append(f"UI/API user {user} (password from AIRFLOW_ADMIN_PASSWORD)")
    return lines


def main(argv: Sequence[str]) -> int:
    try:
        if len(argv) >= 2 and argv[0] == "own":
            own(int(argv[1]), [Path(p) for p in argv[2:]])
        elif len(argv) >= 4 and argv[0] == "run-as" and argv[2] == "--":
            run_as(int(argv[1]), argv[3:])
        elif argv == ["prepare"]:
            for line in prepare(os.environ):
                print(f"airflow-init: {line}", flush=True)
        else:
            print("usage: pith_init.py own UID PATH... | prepare | run-as UID -- CMD...", file=sys.stderr)
            return 2
    except InitError as exc:
        print(f"airflow-init: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # one line, never a traceback that could carry settings
        from pith_pipeline.errors import PithError

        if isinstance(exc, PithError):
            print(f"airflow-init: error: {exc}", file=sys.stderr)
            return 1
        print(f"airflow-init: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
