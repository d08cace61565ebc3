"""The docker/ stack's behaviour as compose would run it, without Docker.

compose.yaml is loaded the way Compose v2 loads it (YAML merge keys, then `${VAR}`,
`${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `$$` against an .env), and the
checks ask what an operator gets: who each service runs as, what waits for what,
which settings reach the containers, what real AWS changes, which secrets refuse
to start. airflow-init's pith part (docker/pith_init.py) and the image's entrypoint
wrapper are run for real. tests/docker/test_stack_live.py starts the stack itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)
LONG_RUNNING = tuple(s for s in AIRFLOW_SERVICES if s != "airflow-init")
_VAR = re.compile(r"\$\$|\$\{([A-Za-z0-9_]+)(?:(:?[-?])((?:[^{}]|\{[^{}]*\})*))?\}")


class Missing(Exception):
    """A `${VAR:?message}` whose variable is unset or empty: compose refuses to start."""


def interpolate(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        have = env.get(name)
        unset = not have if op in (":-", ":?") else have is None
        if op in (":?", "?") and unset:
            raise Missing(f"{name}: {arg}")
        if op in (":-", "-") and unset:
            return interpolate(arg, env)
        return have or ""

    return _VAR.sub(sub, value)


def resolve(node: Any, env: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    if isinstance(node, str):
        return interpolate(node, env)
    return node


def env_file(path: Path) -> dict[str, str]:
    return {
        ln.split("=", 1)[0]: ln.split("=", 1)[1]
        for ln in path.read_text().splitlines()
        if "=" in ln and not ln.startswith("#")
    }


@pytest.fixture(scope="module")
def made_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The .env an operator gets from docker/make-env.sh."""
    out = tmp_path_factory.mktemp("env") / ".env"
    subprocess.run(["bash", str(DOCKER / "make-env.sh"), str(out)], check=True, capture_output=True)
    return env_file(out)


def compose(env: dict[str, str]) -> dict[str, Any]:
    raw = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return resolve({k: v for k, v in raw.items() if not k.startswith("x-")}, env)


def services(env: dict[str, str]) -> dict[str, Any]:
    return dict(compose(env)["services"])


def load_init() -> ModuleType:
    """docker/pith_init.py, the script airflow-init runs (not a package module)."""
    if "pith_init" in sys.modules:
        return sys.modules["pith_init"]
    spec = importlib.util.spec_from_file_location("pith_init", DOCKER / "pith_init.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pith_init"] = mod
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------- secrets
def test_the_example_env_refuses_to_start_until_secrets_are_made() -> None:
    with pytest.raises(Missing, match=r"make-env\.sh"):
        compose(env_file(DOCKER / ".env.example"))


def test_make_env_secrets_pass_init_and_placeholders_do_not(made_env: dict[str, str]) -> None:
    init = load_init()
    env = services(made_env)["airflow-init"]["environment"]
    assert init.secret_problems(env) == []
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] == "False"
    weak = dict(env, AIRFLOW__API_AUTH__JWT_SECRET="change-me-to-a-long-random-string")
    weak["AIRFLOW__CORE__FERNET_KEY"] = "not-a-key"
    weak["AIRFLOW__API__SECRET_KEY"] = "sixteen-bytes-xx"
    problems = init.secret_problems(weak)
    assert len(problems) == 3
    for problem, name in zip(
        problems, ("AIRFLOW_FERNET_KEY", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY"), strict=True
    ):
        assert problem.startswith(name)


def test_init_refuses_weak_secrets_in_one_line_without_their_values(
    made_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    init = load_init()
    env = services(made_env)["airflow-init"]["environment"]
    for k, v in dict(env, AIRFLOW__API__SECRET_KEY="short-secret-value").items():
        monkeypatch.setenv(k, v)
    assert init.main(["prepare"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "AIRFLOW_API_SECRET_KEY" in err
    assert "short-secret-value" not in err and env["AIRFLOW__CORE__FERNET_KEY"] not in err


def test_make_env_never_replaces_an_env_file(tmp_path: Path) -> None:
    target = tmp_path / ".env"
    target.write_text("AIRFLOW_FERNET_KEY=in-use\n")
    proc = subprocess.run(["bash", str(DOCKER / "make-env.sh"), str(target)], capture_output=True)
    assert proc.returncode == 1
    assert target.read_text() == "AIRFLOW_FERNET_KEY=in-use\n"


# ---------------------------------------------- users, volumes, ownership
def test_services_run_as_airflow_uid_and_only_init_starts_as_root(made_env: dict[str, str]) -> None:
    svc = services(dict(made_env, AIRFLOW_UID="1234"))
    for name in LONG_RUNNING:
        assert svc[name]["user"] == "1234:0", name
    assert svc["airflow-init"]["user"] == "0:0"
    assert svc["airflow-init"]["entrypoint"] == ["/bin/bash", "/opt/pith/airflow-init.sh"]
    assert svc["airflow-init"]["environment"]["AIRFLOW_UID"] == "1234"
    assert "PITH_ADMIN_PASSWORD" not in svc["airflow-scheduler"]["environment"]


def test_the_signing_key_is_on_a_named_volume_every_airflow_service_mounts(made_env: dict[str, str]) -> None:
    spec = compose(made_env)
    signer = spec["services"]["airflow-scheduler"]["environment"]["PITH_SIGNER"]
    scheme, path = load_init().signer_file(signer)
    assert scheme == "file"
    for name in AIRFLOW_SERVICES:
        mounts = {v.split(":")[1]: v.split(":")[0] for v in spec["services"][name]["volumes"]}
        volume = mounts.get(str(path.parent))
        assert volume in spec["volumes"], (name, mounts)


def test_init_hands_volumes_to_airflow_uid_with_private_key_modes(tmp_path: Path) -> None:
    init = load_init()
    keys, logs = tmp_path / "keys", tmp_path / "logs" / "dag_id"
    keys.mkdir()
    logs.mkdir(parents=True)
    (keys / "pith-private-key.json").write_text("{}")
    os.chmod(keys / "pith-private-key.json", 0o644)
    (keys / "pith-signing-key.json").write_text("{}")
    os.chmod(keys / "pith-signing-key.json", 0o644)
    uid = 4321 if os.geteuid() == 0 else os.getuid()
    init.own(uid, [keys, tmp_path / "logs"])
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE((keys / "pith-private-key.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((keys / "pith-signing-key.json").stat().st_mode) == 0o644  # public
    for p in (keys, keys / "pith-private-key.json", logs):
        assert (p.stat().st_uid, p.stat().st_gid) == (uid, 0 if os.geteuid() == 0 else p.stat().st_gid)


# ----------------------------------------------------------- signing key
@pytest.fixture
def key_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PITH_SIGNER": f"file:{tmp_path / 'keys' / 'pith-private-key.json'}",
        "PITH_STORE": str(tmp_path / "store"),
    }


def publish_key_document(store: Path, public_doc: Path) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / "pith-signing-key.json").write_bytes(public_doc.read_bytes())


def test_init_creates_a_key_once_and_keeps_it(key_env: dict[str, str]) -> None:
    init = load_init()
    assert " created (key " in init.ensure_signing_key(key_env)
    key = Path(key_env["PITH_SIGNER"][len("file:") :])
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    before = key.read_bytes()
    publish_key_document(Path(key_env["PITH_STORE"]), key.with_name("pith-signing-key.json"))
    assert " kept (key " in init.ensure_signing_key(key_env)
    assert key.read_bytes() == before


def test_init_never_replaces_the_key_a_store_is_signed_with(key_env: dict[str, str], tmp_path: Path) -> None:
    init = load_init()
    init.ensure_signing_key(key_env)
    key = Path(key_env["PITH_SIGNER"][len("file:") :])
    publish_key_document(Path(key_env["PITH_STORE"]), key.with_name("pith-signing-key.json"))
    key.rename(tmp_path / "lost-volume.json")  # a deleted volume, a moved path
    with pytest.raises(init.InitError, match="refusing to make a new signing key"):
        init.ensure_signing_key(key_env)
    assert not key.exists()
    # deliberately, once: a new key (to be rotated in by the operator)
    assert " created " in init.ensure_signing_key(dict(key_env, PITH_ALLOW_NEW_SIGNING_KEY="1"))


def test_init_refuses_a_key_the_store_does_not_know(key_env: dict[str, str], tmp_path: Path) -> None:
    init = load_init()
    other = dict(key_env, PITH_SIGNER=f"file:{tmp_path / 'other' / 'pith-private-key.json'}")
    init.ensure_signing_key(other)
    publish_key_document(Path(key_env["PITH_STORE"]), tmp_path / "other" / "pith-signing-key.json")
    (tmp_path / "keys").mkdir()
    from pith_pipeline.signing.local import generate_key

    generate_key(tmp_path / "keys")
    with pytest.raises(init.InitError, match="is not a key of"):
        init.ensure_signing_key(key_env)


def test_init_follows_pith_signer_for_envelopes_and_leaves_remote_signers_alone() -> None:
    init = load_init()
    assert init.signer_file("kms-envelope:/srv/keys/e.json") == ("kms-envelope", Path("/srv/keys/e.json"))
    assert init.signer_file("kms-envelope:s3://bucket/e.json") == ("kms-envelope", None)
    assert init.signer_file("kms:alias/pith") == ("kms", None)
    assert "nothing to create" in init.ensure_signing_key({"PITH_SIGNER": "kms:alias/pith"})


def test_init_writes_the_ui_password_file_for_the_simple_auth_manager(tmp_path: Path) -> None:
    init = load_init()
    target = tmp_path / "auth" / "passwords.json"
    init.write_passwords_file(target, "admin", "a-long-password")
    assert json.loads(target.read_text()) == {"admin": "a-long-password"}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


# ------------------------------------------------- health and start order
def test_every_long_running_service_has_a_healthcheck(made_env: dict[str, str]) -> None:
    svc = services(made_env)
    for name, s in svc.items():
        if name == "airflow-init":
            continue
        test = s.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), name


def test_services_wait_for_health_not_just_start(made_env: dict[str, str]) -> None:
    svc = services(made_env)
    for name, s in svc.items():
        for dep, cond in s.get("depends_on", {}).items():
            want = "service_completed_successfully" if dep == "airflow-init" else "service_healthy"
            assert cond["condition"] == want, (name, dep)
            if want == "service_healthy":
                assert "healthcheck" in svc[dep], dep
    for name in LONG_RUNNING:
        deps = svc[name]["depends_on"]
        assert {"postgres", "s3", "airflow-init"} <= set(deps), name
        if name != "airflow-apiserver":  # tasks talk to the execution API
            assert "airflow-apiserver" in deps, name
    assert svc["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_services_stop_on_sigterm_and_local_images_are_never_pulled(made_env: dict[str, str]) -> None:
    svc = services(made_env)
    for name, s in svc.items():
        assert s.get("init") is True, name
    for name in AIRFLOW_SERVICES:
        assert svc[name]["pull_policy"] == "build", name


# ------------------------------------------------------------- settings
def test_every_pith_setting_in_env_reaches_every_airflow_service(made_env: dict[str, str]) -> None:
    settable = {k for k in env_file(DOCKER / ".env.example") if k.startswith("PITH_")}
    host_only = {"PITH_SNAPSHOT_DIR"}
    env = dict(made_env, **{k: f"value-of-{k}" for k in settable - host_only})
    svc = services(env)
    for name in AIRFLOW_SERVICES:
        got = svc[name]["environment"]
        for k in settable - host_only:
            assert got.get(k) == f"value-of-{k}", (name, k)


def test_the_bucket_is_derived_from_pith_store(made_env: dict[str, str]) -> None:
    """Only PITH_STORE names the bucket; init creates that one on the local S3."""
    assert "PITH_BUCKET" not in env_file(DOCKER / ".env.example")
    init = load_init()
    assert "must already exist" in init.ensure_bucket("s3://real-bucket/p", {})


def test_local_stack_points_boto3_at_the_s3_service_with_its_credentials(made_env: dict[str, str]) -> None:
    svc = services(made_env)
    env = svc["airflow-scheduler"]["environment"]
    assert env["AWS_ENDPOINT_URL_S3"] == "http://s3:8333"
    assert env["AWS_ACCESS_KEY_ID"] == svc["s3"]["environment"]["S3_ACCESS_KEY"]
    assert env["AWS_SECRET_ACCESS_KEY"] == svc["s3"]["environment"]["S3_SECRET_KEY"] != ""
    assert env["PITH_STORE"].startswith("s3://")
    assert made_env["COMPOSE_PROFILES"] == "local-s3" and svc["s3"]["profiles"] == ["local-s3"]


def test_real_aws_is_a_matter_of_env_alone(made_env: dict[str, str]) -> None:
    aws = dict(
        made_env,
        COMPOSE_PROFILES="",
        AWS_ENDPOINT_URL_S3="",
        AWS_ACCESS_KEY_ID="",
        AWS_SECRET_ACCESS_KEY="",
        AWS_DEFAULT_REGION="eu-west-1",
        PITH_STORE="s3://registry-bucket/pith",
        PITH_SIGNER="kms:alias/pith-registry",
    )
    svc = services(aws)
    env = svc["airflow-scheduler"]["environment"]
    # the s3 service is not started without its profile, and nothing requires it
    assert "local-s3" not in aws["COMPOSE_PROFILES"].split(",")
    for name in LONG_RUNNING:
        assert svc[name]["depends_on"]["s3"]["required"] is False
    # the image's entrypoint drops the empty settings: boto3 uses AWS and the IAM role
    proc = subprocess.run(
        ["bash", str(DOCKER / "pith-entrypoint.sh")],
        env={**env, "PATH": os.environ["PATH"], "PITH_NEXT_ENTRYPOINT": "env"},
        capture_output=True,
        check=True,
    )
    seen = dict(ln.split("=", 1) for ln in proc.stdout.decode().splitlines() if "=" in ln)
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_KMS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert var not in seen, var
    assert seen["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert seen["PITH_STORE"] == "s3://registry-bucket/pith"
    assert seen["PITH_SIGNER"] == "kms:alias/pith-registry"


def test_the_snapshot_is_a_read_only_bind_mount_of_the_host_directory(made_env: dict[str, str]) -> None:
    svc = services(dict(made_env, PITH_SNAPSHOT_DIR="/srv/arxiv"))
    for name in AIRFLOW_SERVICES:
        assert "/srv/arxiv:/data:ro" in svc[name]["volumes"], name


def test_published_ports_bind_to_localhost_only(made_env: dict[str, str]) -> None:
    for name, s in services(made_env).items():
        for port in s.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


# --------------------------------------------------------------- images
def test_images_are_pinned_and_base_images_are_substitutable(made_env: dict[str, str]) -> None:
    svc = services(made_env)
    for name, s in svc.items():
        if "build" in s:
            continue
        repo, _, tag = s["image"].rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), (name, s["image"])
    base = services(dict(made_env, AIRFLOW_BASE_IMAGE="local/airflow:ci", POSTGRES_IMAGE="local/pg:ci"))
    for name in AIRFLOW_SERVICES:
        assert base[name]["build"]["args"]["AIRFLOW_BASE"] == "local/airflow:ci"
    assert base["postgres"]["image"] == "local/pg:ci"
    official = svc["airflow-scheduler"]["build"]["args"]
    assert official["AIRFLOW_BASE"] == "apache/airflow:3.3.2-python3.11"
    assert official["AIRFLOW_CONSTRAINTS"].endswith("/constraints-3.3.2/constraints-3.11.txt")


def test_dockerfile_builds_on_its_base_argument_with_airflows_constraints() -> None:
    lines = (DOCKER / "Dockerfile").read_text().splitlines()
    assert not any(ln.lower().startswith("# syntax=") for ln in lines)
    assert next(ln for ln in lines if ln.startswith("FROM")) == "FROM ${AIRFLOW_BASE}"
    pip = next(ln for ln in lines if "pip install" in ln)
    assert '--constraint "${AIRFLOW_CONSTRAINTS}"' in pip and '"apache-airflow==3.3.2"' in pip
    copies = [ln.split()[1:-1] for ln in lines if ln.startswith("COPY")]
    sources = [s for args in copies for s in args if not s.startswith("--")]
    assert sources
    for src in sources:
        assert (REPO / src).exists(), src


def test_compose_v2_is_stated_where_the_stack_starts() -> None:
    head = (DOCKER / "compose.yaml").read_text().split("\nname:", 1)[0]
    assert "Compose v2" in head
    assert "Compose v2" in (REPO / "docs" / "pages" / "docker.md").read_text()


def test_init_script_runs_pith_then_the_images_entrypoint() -> None:
    """Bash syntax is valid and the order holds: ownership as root, then pith, then /entrypoint."""
    script = DOCKER / "airflow-init.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    body = [ln.strip() for ln in script.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    steps = [
        m.group(1) or m.group(2)
        for ln in body
        if (m := re.search(r"pith_init\.py (own|run-as|prepare)|(/entrypoint) ", ln)) is not None
    ]
    assert steps == ["own", "run-as", "prepare", "/entrypoint"]
