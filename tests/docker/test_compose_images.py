"""Every image the compose files name is one something builds or loads, under that exact
tag: a green stack test must never depend on an image an earlier run left in the daemon.

Plain (not live): runs in the everyday suite, reading the files as compose would.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import docker_stack as st
import pytest

COMPOSE = st.DOCKER_DIR / "compose.yaml"
CI = st.NO_REGISTRY


def example_env() -> dict[str, str]:
    """The defaults an operator's docker/.env starts from (make-env.sh copies this file)."""
    return st.read_env_file(st.DOCKER_DIR / ".env.example")


def test_ci_stack_names_only_images_the_stack_test_builds() -> None:
    env = example_env() | st.ci_overrides()
    problems = st.unbuilt_images([COMPOSE, CI], env, set(st.ci_images()))
    assert problems == []


def test_ci_stack_covers_every_service_with_never_pulled_images() -> None:
    """The CI variant pulls nothing: each service is built by compose or by docker_stack."""
    env = example_env() | st.ci_overrides()
    images = st.compose_images([COMPOSE, CI], env)
    built = set(st.ci_images())
    pulled = [i.service for i in images if not i.built_here and i.image not in built]
    assert pulled == []
    assert {"s3", "postgres", "redis"} <= {i.service for i in images}
    assert all(i.pull_policy in ("never", "build") for i in images), images


@pytest.mark.parametrize("var", [st.li.S3_IMAGE_VAR, st.li.POSTGRES_IMAGE_VAR, st.li.REDIS_IMAGE_VAR])
def test_ci_file_without_the_stack_tests_variables_is_refused(var: str) -> None:
    """With only the defaults (no ci_overrides), compose must refuse, not fall back on a
    fixed tag that only a leftover image could satisfy."""
    env = example_env() | {k: v for k, v in st.ci_overrides().items() if k != var}
    with pytest.raises(st.InterpolationError, match=var):
        st.compose_images([COMPOSE, CI], env)


def test_default_stack_builds_its_own_image_and_pins_the_rest() -> None:
    """docker/compose.yaml alone, with .env.example: pith's image is built by compose;
    every other image is a pinned registry image compose may pull."""
    images = st.compose_images([COMPOSE], example_env())
    for img in images:
        if img.built_here:
            assert img.pull_policy == "build", img
        else:
            assert img.pull_policy != "never", img
            name, _, tag = img.image.rpartition(":")
            assert name and tag and tag != "latest", img


def test_tags_are_keyed_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to the Debian recipe changes every CI tag (so a kept cache rebuilds)."""
    before = st.ci_images()
    monkeypatch.setattr(st.li, "DEBIAN_MIRROR", "http://mirror.invalid/debian")
    after = st.li.Recipe(st.recipe().pins, prefix=st.CI_PREFIX).images()
    assert set(before).isdisjoint(after)


def test_interpolation_matches_compose() -> None:
    env = {"A": "a", "E": ""}
    assert st.interpolate("${A}-${E:-d}-${E-d}-${U-u}-$$A-$A", env) == "a-d--u-$A-a"
    with pytest.raises(st.InterpolationError, match="E: need it"):
        st.interpolate("${E:?need it}", env)
    assert st.interpolate("${E?x}", env) == ""


@pytest.mark.parametrize("image", sorted(st.li.IMAGE_FILES))
def test_every_file_an_image_copies_is_in_its_tag(image: str) -> None:
    """A COPY source left out of the key would let a changed file hide behind an old tag."""
    dockerfile = st.li.IMAGES / f"{image}.Dockerfile"
    copied = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words and words[0] == "COPY":
            copied += [w for w in words[1:-1] if not w.startswith("--")]
    keyed = set(st.li.IMAGE_FILES[image])
    assert dockerfile.name in keyed
    assert [c for c in copied if c != "wheels" and c not in keyed] == []


def test_make_env_local_images_points_the_stack_at_exactly_the_built_images(tmp_path: Path) -> None:
    """The operator's no-registry path: local_images.py's tags, make-env.sh --local-images,
    compose.yaml + compose.no-registry.yaml name nothing else."""
    values = st.write_env(tmp_path / ".env", {}, local_images=True)
    assert (tmp_path / ".env").stat().st_mode & 0o777 == 0o600
    assert st.unbuilt_images([COMPOSE, CI], values, set(st.ci_images())) == []
    assert {values[k] for k in ("AIRFLOW_BASE_IMAGE", "POSTGRES_IMAGE", "REDIS_IMAGE")} <= set(st.ci_images())


def test_make_env_local_images_without_built_images_says_what_to_run(tmp_path: Path) -> None:
    env = dict(os.environ, PITH_LOCAL_IMAGES_ENV=str(tmp_path / "absent.env"))
    proc = subprocess.run(
        ["bash", str(st.DOCKER_DIR / "make-env.sh"), "--local-images", str(tmp_path / ".env")],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "docker/local_images.py" in proc.stderr
    assert not (tmp_path / ".env").exists()


def test_local_images_without_a_daemon_fails_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["python3", str(st.DOCKER_DIR / "local_images.py"), "--docker", "/bin/false",
         "--env-file", str(tmp_path / "tags.env")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "no Docker daemon" in proc.stderr, proc.stderr
    assert not (tmp_path / "tags.env").exists()
