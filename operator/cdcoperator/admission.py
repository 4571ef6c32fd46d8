"""What the validating admission webhook decides for one CdcConnector (pure; kopf glue: ``webhook``).

The API server applies the CRD's schema and CEL rules before calling the webhook; what they cannot
express is judged here, with the same checks as ``shardcdc validate``: the worker's own configuration
validator on the properties the operator would generate (``spec.config`` included: unknown
properties, bad regular expressions, include and exclude lists together, enum values, types), the
cross-field rules of :mod:`cdcoperator.model`, and the installer's policy (:mod:`cdcoperator.policy`).
"""

from __future__ import annotations

from cdcoperator.connectorcheck import validate_connector  # `shardcdc validate`'s own checks
from cdcoperator.policy import Policy
from cdcworker.jsontypes import JsonMapping

__all__ = ["MAX_MESSAGE", "denial_message", "review"]

# kubectl prints the whole message; the API server caps a status message anyway. Long enough for
# every problem of a realistic spec, short enough that an 8 MB value cannot be echoed back.
MAX_MESSAGE = 4096


def review(body: JsonMapping, old: JsonMapping | None, policy: Policy | None) -> list[str]:
    """The problems of a CREATE (``old`` None) or UPDATE of ``body``; [] admits it.

    An update that leaves ``spec`` as it was is always admitted: the operator's own writes
    (finalizer, annotations) and a deletion must never be blocked by a spec admitted before this
    webhook, or before a stricter policy, existed.
    """
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return []
    if old is not None and old.get("spec") == body.get("spec"):
        return []

    problems = list(validate_connector(body))
    if policy is not None:
        problems += policy.violations(body.get("spec") or {})
    return problems


def denial_message(problems: list[str]) -> str:
    """One message for the API server's answer to ``kubectl apply``: every problem, ``; ``-separated."""
    text = "; ".join(problems)
    cut = " ... (truncated)"
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - len(cut)] + cut
