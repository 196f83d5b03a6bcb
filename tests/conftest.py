"""Fixtures shared by every test folder: the local training image for the --image tests.

`make test` runs the files side by side (pytest-xdist, --dist loadfile: each file's tests in one
worker, so module fixtures such as a Slurm or emulated cluster are built once). What files share
on this host is made safe for that: subnets are taken under a host-wide lock, the image build
under its own, and every cluster, state folder and container is named per test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis on this project's machines: 2 cores that other test files load too. A slow example
# or a slow draw is the machine's load, not a finding, so no per-example deadline and no
# too-slow health check; every test keeps its own example count. Loaded here, before any test
# module is imported: a test's own @settings takes what it does not name from this profile.
LOAD_TOLERANT = [HealthCheck.too_slow]
settings.register_profile("loaded-box", deadline=None, suppress_health_check=LOAD_TOLERANT)
settings.load_profile("loaded-box")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files with a slow test first, each file's tests kept together and every file in its
    order otherwise. Side by side, files are handed to the workers in this order: a long file
    handed out last keeps one worker busy after the others ran out of files, and the suite lasts
    as long as that file's tail (the longest-first rule of scheduling)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start building the training image at once, in the background, when it is not there yet:
    on a fresh machine the build (~2 min) then overlaps the tests that do not need it. Once,
    from the controlling process (not from each xdist worker); the fixture waits for it."""
    from trainimage import why_not

    if hasattr(session.config, "workerinput") or why_not() is not None:
        return
    build = Path(__file__).with_name("trainimage.py")
    log = open(os.devnull, "wb")  # noqa: SIM115 - the build outlives this hook
    subprocess.Popen([sys.executable, str(build)], stdout=log, stderr=log, start_new_session=True)


@pytest.fixture(scope="session")
def train_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A local training image (python3, Open MPI; see trainimage.py) and the podman settings file
    this host needs, built once per session (once per host: podman keeps it)."""
    from trainimage import containers_conf, ensure_image, why_not

    why = why_not()
    if why:
        pytest.skip(why)
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(containers_conf())
    tag, _ = ensure_image({**os.environ, "CONTAINERS_CONF": str(conf)})
    return tag, conf
