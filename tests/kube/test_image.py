"""The scheduler's and agent's image: the repository's Containerfile built with a real podman
(no registry here: its base is the small local image scripts/base_image.py makes, given as BASE
as the Containerfile tells a user to), then run as the manifests run it."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

import ringleader
from ringleader.engines.kubernetes.manifests import DEFAULT_IMAGE, install
from trainimage import base_image, containers_conf, ensure_image, why_not

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"


def test_the_default_image_is_the_one_the_containerfile_says_to_build() -> None:
    assert DEFAULT_IMAGE.endswith(f":{ringleader.__version__}")
    assert f"podman build -t {DEFAULT_IMAGE} ." in CONTAINERFILE.read_text()
    deployment = next(o for o in install() if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == DEFAULT_IMAGE


@pytest.fixture(scope="module")
def small_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The base scripts/base_image.py builds (python3, its venv module, CA certificates), built
    once per host as tests/trainimage.py builds its image; and this host's podman settings."""
    why = why_not()
    if why:
        pytest.skip(why)
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(containers_conf())
    tag, seconds = ensure_image({**os.environ, "CONTAINERS_CONF": str(conf)}, "ringleader-test-base",
                                base_image.PACKAGES)  # fmt: skip
    print(f"base image {tag}: " + (f"built in {seconds:.0f} s" if seconds else "already built"))
    return tag, conf


def _pip_settings() -> list[str]:
    """This host's way to PyPI (a proxy's CA, a mirror), passed to the build as the Containerfile
    says a user behind one does."""
    out = []
    cert = os.environ.get("PIP_CERT")
    if cert and Path(cert).is_file():
        out += ["-v", f"{cert}:/run/pip-ca.crt:ro", "--build-arg", "PIP_CERT=/run/pip-ca.crt"]
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        value = os.environ.get(key)
        if value and all(u.startswith(("http://", "https://")) for u in value.split()):  # not this host's files
            out += ["--build-arg", f"{key}={value}"]
    return out


@pytest.mark.timeout(900)  # a first run also bootstraps the base (~2 min)
def test_containerfile_builds_an_image_that_runs_as_the_manifests_run_it(small_base: tuple[str, Path]) -> None:
    base, conf = small_base
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    tag = f"localhost/ringleader-image-test:{uuid.uuid4().hex[:12]}"
    build = subprocess.run(["podman", "build", "--network", "host", "--build-arg", f"BASE={base}", *_pip_settings(),
                            "-t", tag, "-f", str(CONTAINERFILE), str(ROOT)],
                           env=env, capture_output=True, text=True, timeout=540)  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    try:
        size = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", tag], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        print(f"image {tag} on {base}: {int(size.stdout) / 1e6:.0f} MB")
        # as the scheduler Deployment runs it: non-root (the image's user), read-only root, no network
        run = ["podman", "run", "--rm", "--network", "none", "--read-only", tag]
        version = subprocess.run([*run, "--version"], env=env, capture_output=True, text=True, timeout=120)
        assert version.stdout.strip() == f"ringleader, version {ringleader.__version__}", version.stderr
        user = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "id", tag, "-u"],
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert user.stdout.strip() == "65532"
        helped = subprocess.run([*run, "kube", "scheduler", "--help"], env=env, capture_output=True, text=True,
                                timeout=120)  # fmt: skip
        assert helped.returncode == 0 and "Schedule pods with `schedulerName: ringleader`" in helped.stdout
        # the agent's self-check: no GPU in this container, so it says why on one line and fails
        check = subprocess.run([*run, "kube", "agent", "--check"], env=env, capture_output=True, text=True,
                               timeout=120)  # fmt: skip
        assert check.returncode == 1 and check.stderr.startswith("error: no GPU found here (")
        assert len(check.stderr.strip().splitlines()) == 1
    finally:
        subprocess.run(["podman", "rmi", "-f", tag], env=env, capture_output=True, timeout=120)
