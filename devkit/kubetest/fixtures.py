"""pytest glue, kept free of a pytest import so the package works outside tests.

Use from a conftest or test module::

    @pytest.fixture(scope="module")
    def kube_control_plane() -> Iterator[KubeControlPlane]:
        yield from kube_control_plane_fixture()

Every caller in one process gets the same control plane, started on first use and stopped at
exit: the ``kubernetes`` client reads ``$KUBECONFIG`` (and so its CA file path) once per
process, so a second plane with other certificates would be invisible to it — and one start
(about 3 s) serves the whole session. Missing binaries raise ``MissingBinariesError`` (a test
error saying to run ``make kube``), never a skip.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator

from kubetest.controlplane import KubeControlPlane

_lock = threading.Lock()
_shared: KubeControlPlane | None = None


def shared_control_plane() -> KubeControlPlane:
    """The process-wide control plane, started on first use and closed at interpreter exit."""
    global _shared
    with _lock:
        if _shared is None:
            plane = KubeControlPlane()
            plane.start()
            atexit.register(plane.close)
            _shared = plane
        return _shared


def kube_control_plane_fixture() -> Iterator[KubeControlPlane]:
    """Yield the shared control plane (it outlives the fixture; see the module docstring)."""
    yield shared_control_plane()
