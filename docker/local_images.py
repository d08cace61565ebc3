#!/usr/bin/env python3
"""Build the stack's base images locally, from Debian and PyPI: no registry needed.

    python3 docker/local_images.py            # build (or find) them; writes docker/.local-images.env
    docker/make-env.sh --local-images         # a docker/.env that points at them
    docker compose -f docker/compose.yaml -f docker/compose.no-registry.yaml up -d --wait

What it builds (docker/base-images/), each tagged by a hash of what it is made of, so a
changed recipe is a new tag and an old image can never stand in for a new one:

    pith-local/debian:bookworm-<hash>   debootstrap --variant=minbase bookworm | docker import
    pith-local/airflow-base:<hash>      Airflow 3.3.2 from PyPI wheels (also moto's S3 server)
    pith-local/postgres:<hash>          Debian's PostgreSQL 15
    pith-local/redis:<hash>             Debian's redis-server (the celery profile's broker)

The live stack test (tests/docker/docker_stack.py) builds its images with this module.
Needs root (debootstrap), a Docker daemon, the network to the Debian mirror and PyPI,
and pip. The wheels are pinned to this Python environment's versions when it has
Apache Airflow 3.3.2 installed, else to Airflow's published constraints for 3.3.2
(--constraints names another file).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from collections.abc import Sequence
from pathlib import Path

DOCKER_DIR = Path(__file__).resolve().parent
REPO = DOCKER_DIR.parent
IMAGES = DOCKER_DIR / "base-images"
ENV_FILE = DOCKER_DIR / ".local-images.env"
PREFIX = "pith-local"
AIRFLOW_VERSION = "3.3.2"
AIRFLOW_CONSTRAINTS_URL = (
    f"https://raw.githubusercontent.com/apache/airflow/constraints-{AIRFLOW_VERSION}/constraints-3.11.txt"
)
#: The Debian recipe every image starts from; its tag is keyed by exactly these.
DEBIAN_SUITE = "bookworm"
DEBIAN_VARIANT = "minbase"
DEBIAN_MIRROR = os.environ.get("PITH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The files of docker/base-images/ each image is built from (its tag hashes them).
IMAGE_FILES = {
    "airflow-base": ("airflow-base.Dockerfile", "entrypoint.sh", "moto-persistent.py"),
    "postgres": ("postgres.Dockerfile", "postgres-entrypoint.sh"),
    "redis": ("redis.Dockerfile",),
}
#: The compose variables docker/compose.no-registry.yaml requires.
S3_IMAGE_VAR = "PITH_LOCAL_S3_IMAGE"
POSTGRES_IMAGE_VAR = "PITH_LOCAL_POSTGRES_IMAGE"
REDIS_IMAGE_VAR = "PITH_LOCAL_REDIS_IMAGE"


#: Wheels the image's Python (Debian's 3.11.2) needs that pip, evaluating markers for
#: the host's Python, may leave out: redis requires async-timeout when
#: python_full_version < "3.11.3".
TARGET_ONLY_WHEELS = ["async-timeout>=4.0.3"]


class BuildError(RuntimeError):
    """A build step failed; the message carries the command's output tail."""


def run(cmd: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 1800) -> bytes:
    proc = subprocess.run(list(cmd), env=env, timeout=timeout, capture_output=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).decode(errors="replace")[-6000:]
        raise BuildError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}:\n{tail}")
    return proc.stdout


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]


def _files(image: str) -> list[bytes]:
    return [name.encode() + b"\0" + (IMAGES / name).read_bytes() for name in IMAGE_FILES[image]]


def requirements() -> list[str]:
    """What the airflow-base image installs: Airflow (with the providers the stack uses:
    postgres, and celery for the `celery` profile), moto's server, the project's runtime
    and build requirements, and the `report` extra the maintenance DAG's weekly report
    task needs (so the stack image installs offline)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps = (
        sorted(project["project"]["dependencies"])
        + sorted(project["project"]["optional-dependencies"]["report"])
        + sorted(project["build-system"]["requires"])
    )
    return [f"apache-airflow[postgres,celery]=={AIRFLOW_VERSION}", "moto[server]", *deps]


def environment_pins(python: str = sys.executable) -> str:
    """The versions installed in `python`'s environment (pip freeze, editables left out)."""
    frozen = run([python, "-m", "pip", "freeze", "--exclude-editable"], timeout=300).decode()
    return "".join(ln + "\n" for ln in frozen.splitlines() if ln and not ln.startswith("-e"))


class Recipe:
    """The tags of every image, from the Debian recipe and the wheel pins."""

    def __init__(self, pins: str, prefix: str = PREFIX) -> None:
        self.pins = pins
        self.prefix = prefix

    def debian(self) -> str:
        key = _digest(DEBIAN_SUITE, DEBIAN_VARIANT, DEBIAN_MIRROR)
        return f"{self.prefix}/debian:{DEBIAN_SUITE}-{key}"

    def airflow_base(self) -> str:
        wheels = "\n".join([*requirements(), *TARGET_ONLY_WHEELS])
        key = _digest(self.debian(), *_files("airflow-base"), wheels, self.pins)
        return f"{self.prefix}/airflow-base:{key}"

    def postgres(self) -> str:
        return f"{self.prefix}/postgres:{_digest(self.debian(), *_files('postgres'))}"

    def redis(self) -> str:
        return f"{self.prefix}/redis:{_digest(self.debian(), *_files('redis'))}"

    def images(self) -> dict[str, str]:
        """tag -> which image: everything build() makes."""
        return {
            self.debian(): "debian",
            self.airflow_base(): "airflow-base",
            self.postgres(): "postgres",
            self.redis(): "redis",
        }

    def env(self) -> dict[str, str]:
        """The docker/.env settings that point the stack at these images."""
        return {
            "AIRFLOW_BASE_IMAGE": self.airflow_base(),
            "AIRFLOW_CONSTRAINTS": "/opt/ci/constraints.txt",
            "POSTGRES_IMAGE": self.postgres(),
            "REDIS_IMAGE": self.redis(),
            S3_IMAGE_VAR: self.airflow_base(),
            POSTGRES_IMAGE_VAR: self.postgres(),
            REDIS_IMAGE_VAR: self.redis(),
        }


def image_exists(docker: Sequence[str], env: dict[str, str], ref: str) -> bool:
    cmd = [*docker, "image", "inspect", ref]
    return subprocess.run(cmd, env=env, capture_output=True, check=False).returncode == 0


def debian_rootfs(rootfs: Path) -> None:
    """The recipe Recipe.debian() is keyed by: debootstrap SUITE (VARIANT) from MIRROR."""
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    run([debootstrap, f"--variant={DEBIAN_VARIANT}", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR], timeout=900)


def debian_base(docker: Sequence[str], env: dict[str, str], tag: str, workdir: Path) -> None:
    if image_exists(docker, env, tag):
        return
    rootfs = workdir / "rootfs"
    try:
        debian_rootfs(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(
            [*docker, "import", "-", tag],
            stdin=tar.stdout,
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
        tar.stdout.close()
        tar.wait(60)
        if imported.returncode != 0:
            raise BuildError(f"docker import failed: {imported.stderr.decode(errors='replace')[-2000:]}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def wheel_context(recipe: Recipe, workdir: Path) -> Path:
    """A build context: docker/base-images/ and every wheel the images install,
    downloaded on the host pinned to recipe.pins (the builds need no index)."""
    ctx = workdir / "images"
    shutil.copytree(IMAGES, ctx)
    pins = ctx / "pins.txt"
    pins.write_text(recipe.pins)
    wheels = ctx / "wheels"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels)]
    run([*pip, "-c", str(pins), *requirements(), *TARGET_ONLY_WHEELS], timeout=1200)
    return ctx


def build(recipe: Recipe, docker: Sequence[str], env: dict[str, str], workdir: Path) -> list[str]:
    """Build every image of the recipe the daemon lacks; returns the tags built."""
    debian_base(docker, env, recipe.debian(), workdir)
    wanted = [
        ("postgres.Dockerfile", recipe.postgres()),
        ("redis.Dockerfile", recipe.redis()),
        ("airflow-base.Dockerfile", recipe.airflow_base()),
    ]
    missing = [(f, tag) for f, tag in wanted if not image_exists(docker, env, tag)]
    if missing:
        ctx = wheel_context(recipe, workdir)
        try:
            for dockerfile, tag in missing:
                base = f"DEBIAN_BASE={recipe.debian()}"
                run(
                    [
                        *docker,
                        "build",
                        "-q",
                        "--build-arg",
                        base,
                        "-f",
                        str(ctx / dockerfile),
                        "-t",
                        tag,
                        str(ctx),
                    ],
                    env=env,
                )
        finally:
            shutil.rmtree(ctx, ignore_errors=True)
    absent = [tag for tag in recipe.images() if not image_exists(docker, env, tag)]
    if absent:
        raise BuildError(f"built, yet not in the daemon: {', '.join(absent)}")
    return [tag for _, tag in missing]


def write_env_file(recipe: Recipe, path: Path) -> None:
    """The tags, as docker/make-env.sh --local-images reads them."""
    lines = [f"{k}={v}" for k, v in recipe.env().items()]
    head = "# written by docker/local_images.py; read by docker/make-env.sh --local-images\n"
    path.write_text(head + "\n".join(lines) + "\n")


def default_pins(constraints: str | None) -> str:
    """--constraints (a path or URL); else this environment's versions if it runs
    Airflow 3.3.2; else Airflow's published constraints for 3.3.2."""
    if constraints:
        if "://" in constraints:
            with urllib.request.urlopen(constraints, timeout=60) as resp:
                return str(resp.read().decode())
        return Path(constraints).read_text()
    try:
        from importlib.metadata import version

        if version("apache-airflow") == AIRFLOW_VERSION:
            return environment_pins()
    except Exception:  # not installed here: use Airflow's own constraints
        pass
    with urllib.request.urlopen(AIRFLOW_CONSTRAINTS_URL, timeout=60) as resp:
        return str(resp.read().decode())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--constraints", help="pin the wheels to this constraints file (path or URL)")
    parser.add_argument("--docker", default=shutil.which("docker") or "docker", help="the docker client")
    parser.add_argument(
        "--env-file", default=str(ENV_FILE), help=f"where to write the tags (default {ENV_FILE})"
    )
    args = parser.parse_args(argv)
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    probe = subprocess.run([args.docker, "info"], env=env, capture_output=True, check=False)
    if probe.returncode != 0:
        print(f"local_images: error: no Docker daemon answers `{args.docker} info`", file=sys.stderr)
        return 1
    if os.geteuid() != 0 and not image_exists([args.docker], env, Recipe("").debian()):
        print("local_images: error: debootstrap needs root: run it with sudo", file=sys.stderr)
        return 1
    try:
        recipe = Recipe(default_pins(args.constraints))
        with tempfile.TemporaryDirectory(prefix="pith-local-images-") as tmp:
            built = build(recipe, [args.docker], env, Path(tmp))
    except (BuildError, OSError, subprocess.TimeoutExpired) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"local_images: error: {first}", file=sys.stderr)
        detail = str(exc).strip().splitlines()[1:]
        if detail:
            print("\n".join(detail[-40:]), file=sys.stderr)
        return 1
    write_env_file(recipe, Path(args.env_file))
    for tag in recipe.images():
        print(f"local_images: {'built' if tag in built else 'have '} {tag}")
    print(f"local_images: wrote {args.env_file}; now: docker/make-env.sh --local-images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
