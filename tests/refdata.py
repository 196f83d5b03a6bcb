"""Where the public reference material lives (beside the checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
REFERENCE_TOPOLOGIES = SHARED / "reference" / "topologies"


def reference_file(name: str) -> Path:
    """A file of the reference material, or skip the test with the reason."""
    path = REFERENCE_TOPOLOGIES / name
    if not path.exists():
        pytest.skip(f"reference material not present at {path} (checkout without ../shared)")
    return path


def network_reference(name: str) -> Path:
    """A file of the network-topology reference material (fabric dumps, Slurm topology files,
    Kubernetes labels), or skip the test with the reason."""
    path = SHARED / "reference" / "network" / name
    if not path.exists():
        pytest.skip(f"network reference material not present at {path} (checkout without ../shared)")
    return path
