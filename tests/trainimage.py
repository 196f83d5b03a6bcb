"""A small training image built here, with no registry: a minimal Debian root file system
(debootstrap, this host's release) with python3 and Open MPI, imported into podman. It has
python3-venv too: it is the local base the repository's Containerfile is built from in
tests/kube/test_image.py.

The host's virtual environment (torch, mpi4py: built for the same Python minor version and the
same Open MPI) is mounted into the containers with --data, so the image stays ~350 MB. Built
once; podman's own storage keeps it across test sessions, under a tag that is a hash of what
goes into it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import resource
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

PACKAGES = ("python3", "python3-venv", "openmpi-bin")
MIRROR = "http://deb.debian.org/debian"
# Not in the image: documentation, manuals, translations and the downloaded packages.
EXCLUDED = ("./usr/share/doc", "./usr/share/man", "./usr/share/locale", "./var/cache/apt/archives")
RECIPE_VERSION = "1"
SITE_PACKAGES = sysconfig.get_paths()["purelib"]  # the test interpreter's: torch, mpi4py


def release() -> str:
    """This host's Debian release (the image's Open MPI must be the host's mpirun's)."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    return "bookworm"


def image_tag() -> str:
    recipe = repr((RECIPE_VERSION, release(), PACKAGES, MIRROR, EXCLUDED))
    return f"localhost/ringleader-test-train:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


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


def ensure_image(env: dict[str, str]) -> tuple[str, float]:
    """The image's tag, built unless podman has it; and the seconds the build took (0: cached)."""
    import time

    tag = image_tag()
    run = {"env": env, "capture_output": True, "text": True}
    lock_path = Path(tempfile.gettempdir()) / "ringleader-test-train.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session building it: wait for its image
        if subprocess.run(["podman", "image", "exists", tag], **run).returncode == 0:  # type: ignore[call-overload]
            return tag, 0.0
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="ringleader-rootfs-", dir="/var/tmp") as folder:
            root = Path(folder) / "root"
            subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", release(),
                            str(root), MIRROR], check=True, capture_output=True)  # fmt: skip
            tar = subprocess.Popen(["tar", "-C", str(root), "-c", *(f"--exclude={e}" for e in EXCLUDED), "."],
                                   stdout=subprocess.PIPE)  # fmt: skip
            subprocess.run(["podman", "import", "-", tag], stdin=tar.stdout, check=True, **run)  # type: ignore[call-overload]
            assert tar.wait() == 0
        return tag, time.monotonic() - started


if __name__ == "__main__":  # the background build started at the beginning of a test session
    with tempfile.TemporaryDirectory(prefix="ringleader-podman-") as settings:
        conf = Path(settings) / "containers.conf"
        conf.write_text(containers_conf())
        ensure_image({**os.environ, "CONTAINERS_CONF": str(conf)})
