"""Helpers for the operator's integration tests against a real kube-apiserver (no kubelet, no controllers).

``FakeNodes`` (``kubetest.fakenodes``, shared with ``bench/operator_scale.py``) stands in for the Deployment
controller and the kubelet; ``operator_runner`` runs the operator (kopf) in this process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from polling import wait_for as wait_for  # re-exported: the operator tests import it from here

from kubetest.fakenodes import FakeNodes as FakeNodes  # re-exported, as above
from kubetest.fakenodes import streaming_doc as streaming_doc


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
