from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'ringleader[kube]')")

from kube.fakeapi import FakeApiServer


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()
