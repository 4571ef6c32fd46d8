"""The chart under test (``charts/shardcdc``) rendered with the pinned ``helm`` built by ``make helm``.

A missing binary is a test error saying how to build it (``make helm``), never a skip.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "shardcdc"
CRD_CHART = ROOT / "charts" / "shardcdc-crds"
HELM_VERSION = "v3.22.0"  # keep in step with HELM_VERSION in the Makefile


def helm_binary() -> Path:
    env = os.environ.get("SHARDCDC_HELM")
    if env:
        path = Path(env)
    else:
        cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
        path = cache / f"helm-{HELM_VERSION}" / "bin" / "helm"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"helm not built at {path}: run `make helm` (builds it from pinned sources)")
    return path


def helm(*args: str, cwd: Path = ROOT, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run helm with a private config/cache home (no repositories, no plugins of the user's)."""
    home = ROOT / "build" / "helm-home"
    env = {**os.environ, "HELM_CONFIG_HOME": str(home / "config"), "HELM_CACHE_HOME": str(home / "cache"),
           "HELM_DATA_HOME": str(home / "data")}
    env.pop("KUBECONFIG", None)  # lint/template never need a cluster
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout, check=False)


def values_args(values: Mapping[str, Any] | None, tmp: Path) -> list[str]:
    if not values:
        return []
    path = tmp / f"values-{abs(hash(yaml.safe_dump(dict(values))))}.yaml"
    path.write_text(yaml.safe_dump(dict(values), sort_keys=False))
    return ["-f", str(path)]


def template_text(values: Mapping[str, Any] | None, tmp: Path, *, release: str = "shardcdc",
                  namespace: str = "shardcdc-system", chart: Path = CHART, extra: Sequence[str] = ()) -> str:
    """``helm template`` output; raises AssertionError with helm's message when it fails."""
    r = helm("template", release, str(chart), "--namespace", namespace, *values_args(values, tmp), *extra)
    assert r.returncode == 0, r.stderr
    return r.stdout


def render(values: Mapping[str, Any] | None, tmp: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """The rendered objects (empty documents dropped), in helm's install order."""
    return [d for d in yaml.safe_load_all(template_text(values, tmp, **kwargs)) if d]


def by_kind(objs: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
    return [o for o in objs if o["kind"] == kind]
