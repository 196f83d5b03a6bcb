"""Fixtures shared by every test folder: the local training image for the --image tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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
