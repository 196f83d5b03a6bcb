"""Build a small local base image for the repository's Containerfile, with no registry: a minimal
Debian root file system (debootstrap --variant=minbase, this host's release) with python3, its
venv module and CA certificates, imported into podman (or docker) under a local tag.

    sudo python3 scripts/base_image.py                         # prints the tag it made
    podman build --build-arg BASE=localhost/ringleader-base:bookworm -t NAME .

Needs root and debootstrap (apt-get install debootstrap) and reaches only a Debian mirror.
tests/trainimage.py builds its training image with the same code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PACKAGES = ("python3", "python3-venv", "ca-certificates")
MIRROR = "http://deb.debian.org/debian"
# Not in the image: documentation, manuals, translations and the downloaded packages.
EXCLUDED = ("./usr/share/doc", "./usr/share/man", "./usr/share/locale", "./var/cache/apt/archives")


def release() -> str:
    """This host's Debian release (bookworm where the host says none)."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    return "bookworm"


def default_tag() -> str:
    return f"localhost/ringleader-base:{release()}"


def why_not(engine: str) -> str | None:
    """Why the image cannot be built here (None: it can)."""
    if shutil.which("debootstrap") is None:
        return "needs debootstrap (as root: apt-get install debootstrap)"
    if shutil.which(engine) is None:
        return f"needs {engine} to import the image into (or pass --engine)"
    if os.geteuid() != 0:
        return "needs root (debootstrap makes device files and sets owners); run it with sudo"
    return None


def build(tag: str, packages: Sequence[str], engine: str = "podman", env: dict[str, str] | None = None,
          mirror: str = MIRROR) -> None:  # fmt: skip
    """Bootstrap a Debian root with `packages` and import it into `engine` as `tag`."""
    with tempfile.TemporaryDirectory(prefix="ringleader-rootfs-", dir="/var/tmp") as folder:
        root = Path(folder) / "root"
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", release(),
                        str(root), mirror], check=True, capture_output=True)  # fmt: skip
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", *(f"--exclude={e}" for e in EXCLUDED), "."],
                               stdout=subprocess.PIPE)  # fmt: skip
        subprocess.run([engine, "import", "-", tag], stdin=tar.stdout, env=env, check=True, capture_output=True)
        if tar.wait() != 0:
            raise subprocess.CalledProcessError(tar.returncode, "tar")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("tag", nargs="?", default=default_tag(), help="the image's name (default: %(default)s)")
    parser.add_argument("--engine", choices=("podman", "docker"), default="podman" if shutil.which("podman") else
                        "docker", help="where to import it (default: podman if installed)")  # fmt: skip
    parser.add_argument("--mirror", default=MIRROR, help="the Debian mirror (default: %(default)s)")
    args = parser.parse_args(argv)
    why = why_not(args.engine)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    try:
        build(args.tag, PACKAGES, args.engine, mirror=args.mirror)
    except subprocess.CalledProcessError as e:
        said = (e.stderr or e.stdout or b"").decode(errors="replace").strip().splitlines()
        print(f"error: {e.cmd[0]} failed: {said[-1] if said else f'exit {e.returncode}'}", file=sys.stderr)
        return 1
    print(args.tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
