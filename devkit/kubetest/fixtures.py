"""pytest glue, kept free of a pytest import so the package works outside tests.

Use from a conftest or test module::

    @pytest.fixture(scope="session")
    def kube_control_plane() -> Iterator[KubeControlPlane]:
        yield from kube_control_plane_fixture()

Missing binaries raise ``MissingBinariesError`` (a test error saying to run ``make kube``), never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator

from kubetest.controlplane import KubeControlPlane


def kube_control_plane_fixture() -> Iterator[KubeControlPlane]:
    """Start a control plane, yield it, and stop it and remove its files afterwards."""
    plane = KubeControlPlane()
    try:
        plane.start()
        yield plane
    finally:
        plane.close()
