"""A real etcd + kube-apiserver (+ kubectl) on loopback for operator integration tests (envtest style)."""

from kubetest.binaries import DEFAULT_VERSION, KubeBinaries, MissingBinariesError, find_binaries, kube_home
from kubetest.controlplane import ADMIN_USER, RESTRICTED_USER, KubeControlPlane
from kubetest.fixtures import kube_control_plane_fixture

__all__ = [
    "ADMIN_USER",
    "DEFAULT_VERSION",
    "RESTRICTED_USER",
    "KubeBinaries",
    "KubeControlPlane",
    "MissingBinariesError",
    "find_binaries",
    "kube_control_plane_fixture",
    "kube_home",
]
