"""Helpers for the operator's integration tests against a real kube-apiserver (no kubelet, no controllers).

``FakeNodes`` (``kubetest.fakenodes``, shared with ``bench/operator_scale.py``) stands in for the Deployment
controller and the kubelet; ``operator_runner`` runs the operator (kopf) in this process.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from polling import wait_for as wait_for  # re-exported: the operator tests import it from here

from kubetest.fakenodes import FakeNodes as FakeNodes  # re-exported, as above
from kubetest.fakenodes import streaming_doc as streaming_doc

_ROOT = Path(__file__).resolve().parents[1]
# Arguments of the chart's Deployment that name in-pod ports and paths; a test run replaces them.
_POD_ARGS = ("--liveness=", "--metrics-port=", "--webhook-port=", "--webhook-cert-dir=")


@contextlib.contextmanager
def env_var(name: str, value: str) -> Iterator[None]:
    import os

    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def operator_runner(namespace: str, liveness: str, timeout: float = 30) -> Any:
    """kopf running ``cdcoperator.handlers`` in this process, watching ``namespace``.

    kopf's ``-m`` imports the module once per process, so its handlers live in whichever registry was the
    default at first import; fail here, clearly, when another test has swapped the default since.
    """
    import kopf
    from kopf.testing import KopfRunner

    import cdcoperator.handlers  # noqa: F401  (registers the handlers)

    ids = {h.id for h in kopf.get_default_registry()._activities.get_all_handlers()}
    assert "reconciles" in ids, "kopf's default registry lost cdcoperator.handlers (a test swapped it)"
    return KopfRunner(["run", "--standalone", "-n", namespace, f"--liveness={liveness}",
                       "-m", "cdcoperator.handlers"], timeout=timeout)


@contextlib.contextmanager
def chart_operator(kube: Any, chart_args: list[str], kubeconfig: Path | None, log: Path,
                   extra_args: list[str] | None = None, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """``shardcdc operator`` as a subprocess, as the chart's Deployment runs it (``kube``: a
    ``KubeControlPlane``; ``kubeconfig`` None: the admin's).

    The chart's liveness, metrics and webhook arguments are replaced: free loopback ports, and
    ``extra_args`` (e.g. a test's own webhook port and certificate directory). Yields the liveness URL.
    """
    from cdcoperator.local.children import start_bound, stop_group
    from kubetest.controlplane import free_port

    args = [a for a in chart_args if not a.startswith(_POD_ARGS)]
    liveness = f"http://127.0.0.1:{free_port()}/healthz"
    cmd = [str(Path(sys.executable).parent / "shardcdc"), "operator", *args, f"--liveness={liveness}",
           f"--metrics-port={free_port()}", "--resync-seconds=0.5", *(extra_args or [])]
    full_env = {**kube.env(kubeconfig), **(env or {})}
    full_env.pop("SHARDCDC_OPERATOR_KUBECONFIG", None)
    with log.open("wb") as out:
        proc = start_bound(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full_env)
    try:
        def alive() -> bool:
            assert proc.poll() is None, f"operator exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(liveness, timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_for(alive, 60, "the operator's liveness endpoint")
        yield liveness
    finally:
        stop_group(proc, timeout=20)
    assert proc.returncode is not None


def install_operator(plane: Any, namespace: str, kubeconfig: Path) -> Path:
    """The CRD, the operator's RBAC and namespaces in ``plane`` (a ``KubeControlPlane``); a kubeconfig
    at ``kubeconfig`` for the operator's ServiceAccount (least privilege), watching ``namespace``."""
    for ns in ("shardcdc-system", namespace):
        plane.ensure_namespace(ns)
    plane.kubectl("apply", "-f", str(_ROOT / "crds" / "shardcdc.io_cdcconnectors.yaml"), check=True)
    plane.kubectl("apply", "-f", str(_ROOT / "operator" / "rbac.yaml"), check=True)
    plane.wait_established("cdcconnectors.shardcdc.io")
    token = plane.service_account_token("shardcdc-system", "shardcdc-operator")
    return Path(plane.write_kubeconfig(kubeconfig, user="shardcdc-operator", token=token, namespace=namespace))
