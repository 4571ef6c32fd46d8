"""Where the control-plane binaries live (built by ``make kube`` into ``~/.cache/shardcdc/kube-<v>/bin``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Keep in step with KUBE_VERSION in the Makefile (the Makefile exports SHARDCDC_KUBE_HOME anyway).
DEFAULT_VERSION = "v1.33.13"


class MissingBinariesError(FileNotFoundError):
    """The binaries are not built; the message says how to build them."""


@dataclass(frozen=True)
class KubeBinaries:
    kube_apiserver: Path
    etcd: Path
    kubectl: Path


def kube_home() -> Path:
    """``$SHARDCDC_KUBE_HOME`` or the default cache location for the pinned version."""
    env = os.environ.get("SHARDCDC_KUBE_HOME")
    if env:
        return Path(env)
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    return cache / f"kube-{DEFAULT_VERSION}"


def find_binaries(home: Path | None = None) -> KubeBinaries:
    """The three binaries under ``home/bin``; raises :class:`MissingBinariesError` if any is missing."""
    home = home or kube_home()
    bin_dir = home / "bin"
    found = KubeBinaries(bin_dir / "kube-apiserver", bin_dir / "etcd", bin_dir / "kubectl")
    missing = [p.name for p in (found.kube_apiserver, found.etcd, found.kubectl) if not os.access(p, os.X_OK)]
    if missing or not (home / ".complete").is_file():
        raise MissingBinariesError(
            f"kube-apiserver/etcd/kubectl not built in {bin_dir} (missing: {', '.join(missing) or '.complete'}): "
            "run `make kube` first (builds them from pinned sources through the Go module proxy)"
        )
    return found
