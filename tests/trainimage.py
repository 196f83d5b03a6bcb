"""A small training image built here, with no registry: a minimal Debian root file system
(debootstrap, this host's release; scripts/base_image.py builds it) with python3 and Open MPI,
imported into podman. tests/kube/test_image.py builds the Containerfile's base with the same
code and the script's own packages.

The host's virtual environment (torch, mpi4py: built for the same Python minor version and the
same Open MPI) is mounted into the containers with --data, so the image stays ~350 MB. Built
once; podman's own storage keeps it across test sessions, under a tag that is a hash of what
goes into it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import resource
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

PACKAGES = ("python3", "python3-venv", "openmpi-bin")
RECIPE_VERSION = "1"
SITE_PACKAGES = sysconfig.get_paths()["purelib"]  # the test interpreter's: torch, mpi4py


def _load_base_image() -> ModuleType:
    """scripts/base_image.py, the users' way to a local base image: its debootstrap builds ours."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "base_image.py"
    spec = importlib.util.spec_from_file_location("base_image", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


base_image = _load_base_image()
release = base_image.release  # the image's Open MPI must be the host's mpirun's


def image_tag(name: str = "ringleader-test-train", packages: tuple[str, ...] = PACKAGES) -> str:
    recipe = repr((RECIPE_VERSION, release(), packages, base_image.MIRROR, base_image.EXCLUDED))
    return f"localhost/{name}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def containers_conf() -> str:
    """podman's settings for this kind of host (a container on a hybrid-cgroup kernel): runc
    (crun refuses its cgroups), cgroupfs (no systemd), and default ulimits no higher than this
    host's hard limits (podman's defaults are higher, and runc cannot raise them); nproc also no
    higher than kernel.pid_max (runc was refused any more on such a host)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    limits = [f"nofile={n}:{n}" for n in (min(nofile, 1 << 20),) if nofile != resource.RLIM_INFINITY]
    limits += [f"nproc={n}:{n}" for n in (min(nproc, 1 << 22),) if nproc != resource.RLIM_INFINITY]
    text = "[containers]\ndefault_ulimits = [" + ", ".join(f'"{x}"' for x in limits) + "]\n"
    if shutil.which("runc"):
        text += '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
    return text


def why_not() -> str | None:
    """Why the image cannot be built here (None: it can)."""
    missing = [p for p in ("podman", "debootstrap") if shutil.which(p) is None]
    if missing:
        how = "`make test` installs them as root: apt-get install podman runc debootstrap"
        return f"needs {' and '.join(missing)} ({how})"
    if os.geteuid() != 0:
        return "debootstrap and rootful podman need root"
    return None


def ensure_image(env: dict[str, str], name: str = "ringleader-test-train",
                 packages: tuple[str, ...] = PACKAGES) -> tuple[str, float]:  # fmt: skip
    """The image's tag, built unless podman has it; and the seconds the build took (0: cached)."""
    import time

    tag = image_tag(name, packages)
    run = {"env": env, "capture_output": True, "text": True}
    lock_path = Path(tempfile.gettempdir()) / f"{name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session building it: wait for its image
        if subprocess.run(["podman", "image", "exists", tag], **run).returncode == 0:  # type: ignore[call-overload]
            return tag, 0.0
        started = time.monotonic()
        base_image.build(tag, packages, "podman", env)
        return tag, time.monotonic() - started


if __name__ == "__main__":  # the background build started at the beginning of a test session
    with tempfile.TemporaryDirectory(prefix="ringleader-podman-") as settings:
        conf = Path(settings) / "containers.conf"
        conf.write_text(containers_conf())
        ensure_image({**os.environ, "CONTAINERS_CONF": str(conf)})
