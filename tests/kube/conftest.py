from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'ringleader[kube]')")

from kube.fakeapi import FakeApiServer
from kube.realserver import ControlPlane, control_plane, why_absent
from ringleader.engines.kubernetes import manifests
from ringleader.engines.kubernetes.delivery import Delivery


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real v1.36 control plane for the test module (tests/kube/test_real_*.py), started once
    for its tests: etcd, kube-apiserver, kube-controller-manager; kube-scheduler too where the
    module sets ``KUBE_SCHEDULER = True``. ringleader's install is applied with the GPU delivery
    the module's ``GPU_DELIVERY`` names (default env), its scheduler Deployment at 0 replicas (no
    kubelet would run it: a test runs the scheduler in its own process, under the scheduler's
    ServiceAccount token). Skipped with the reason where ../shared/kubernetes-1.36 is absent."""
    why = why_absent()
    if why:
        pytest.skip(why)
    delivery = Delivery(getattr(request.module, "GPU_DELIVERY", "env"))
    install = manifests.install(replicas=0, delivery=delivery)
    folder = tmp_path_factory.mktemp("control-plane")
    with control_plane(folder, getattr(request.module, "KUBE_SCHEDULER", False), install) as plane:
        yield plane
