"""The workers' NetworkPolicy: their only port (metrics, health, ``/status``) from the operator and
the monitoring namespace only (issue 28, case 12).

The chart cannot know which namespaces will hold connectors when the operator serves every
namespace, so the operator makes the policy, one per connector in the connector's namespace
(owned by it, garbage-collected with it), selecting that connector's worker pods. The chart's
``networkPolicy`` values (on by default) reach the operator as JSON in
``$SHARDCDC_OPERATOR_NETWORK_POLICY``::

    {"operatorNamespace": "shardcdc-system", "operatorLabels": {...}, "monitoringNamespace": "monitoring",
     "extraFrom": [<NetworkPolicyPeer>...]}

Unset (local mode, a hand-run operator): no policy. The kubelet's probes are not subject to
NetworkPolicies. Egress is not restricted (workers dial VTGate and Kafka).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdcoperator import naming
from cdcoperator.apply import NETWORK_POLICIES, ClusterApi
from cdcoperator.model import ConnectorResource
from cdcoperator.policy import env_json_object
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["NETWORK_POLICY_ENV", "NetworkPolicyError", "NetworkPolicySettings", "build_network_policy",
           "ensure_network_policy", "load_network_policy", "network_policy_name"]

NETWORK_POLICY_ENV = "SHARDCDC_OPERATOR_NETWORK_POLICY"
_KEYS = ("operatorNamespace", "operatorLabels", "monitoringNamespace", "extraFrom")


class NetworkPolicyError(ValueError):
    """``$SHARDCDC_OPERATOR_NETWORK_POLICY`` cannot be used (the operator refuses to start)."""


@dataclass(frozen=True, slots=True)
class NetworkPolicySettings:
    operator_namespace: str
    operator_labels: tuple[tuple[str, str], ...]
    monitoring_namespace: str = ""  # empty: no monitoring access
    extra_from: tuple[JsonMapping, ...] = ()


def load_network_policy(env: Mapping[str, str] | None = None) -> NetworkPolicySettings | None:
    """The settings in ``$SHARDCDC_OPERATOR_NETWORK_POLICY``, or None (no policy) when unset."""
    doc = env_json_object(NETWORK_POLICY_ENV, _KEYS, NetworkPolicyError, env)
    if doc is None:
        return None
    labels, extra = doc.get("operatorLabels"), doc.get("extraFrom") or []
    if not isinstance(doc.get("operatorNamespace"), str) or not doc["operatorNamespace"]:
        raise NetworkPolicyError(f"${NETWORK_POLICY_ENV}: operatorNamespace must be a namespace name")
    if not isinstance(labels, Mapping) or not labels or not all(isinstance(v, str) for v in labels.values()):
        raise NetworkPolicyError(f"${NETWORK_POLICY_ENV}: operatorLabels must be the operator pod's labels (strings)")
    if not isinstance(extra, list) or not all(isinstance(p, Mapping) for p in extra):
        raise NetworkPolicyError(f"${NETWORK_POLICY_ENV}: extraFrom must be a list of NetworkPolicyPeer objects")
    return NetworkPolicySettings(doc["operatorNamespace"], tuple(sorted(labels.items())),
                                 str(doc.get("monitoringNamespace") or ""), tuple(extra))


def network_policy_name(connector: str) -> str:
    return f"{connector}-workers"


def _namespace(name: str) -> JsonObject:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}


def build_network_policy(cr: ConnectorResource, s: NetworkPolicySettings) -> JsonObject:
    """The connector's workers' NetworkPolicy (pure)."""
    from cdcoperator.objects import owner_reference

    peers: list[JsonMapping] = [{**_namespace(s.operator_namespace),
                                       "podSelector": {"matchLabels": dict(s.operator_labels)}}]
    if s.monitoring_namespace:
        peers.append(_namespace(s.monitoring_namespace))
    peers.extend(s.extra_from)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": network_policy_name(cr.name), "namespace": cr.namespace,
                     "labels": {**naming.selector_labels(cr.name), naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
                     "ownerReferences": [owner_reference(cr)]},
        "spec": {
            # Every worker pod of this connector, whatever its generation (ports by name: the
            # connector's spec.worker.metricsPort may be any number).
            "podSelector": {"matchLabels": naming.selector_labels(cr.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": peers}],
        },
    }


async def ensure_network_policy(kube: ClusterApi, cr: ConnectorResource, s: NetworkPolicySettings) -> str:
    """Create or update the policy; returns the apply outcome (``created``, ``patched``, ``unchanged``)."""
    live = next((p for p in await kube.list_children(NETWORK_POLICIES, cr.namespace, cr.name)
                 if p["metadata"]["name"] == network_policy_name(cr.name)), None)
    return await kube.apply(build_network_policy(cr, s), live)
