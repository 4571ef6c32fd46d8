"""``shardcdc operator``: run the CdcConnector operator (kopf) with the settings in ``handlers``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable

__all__ = ["main", "register"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[],
                       help="serve connectors in this namespace (repeatable; default: the pod's own namespace)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve connectors in every namespace")
    parser.add_argument("--liveness", default="http://0.0.0.0:8081/healthz",
                        help="liveness endpoint URL (empty to disable)")
    parser.add_argument("--resync-seconds", type=float, default=None,
                        help="interval of the level-based resync (env SHARDCDC_OPERATOR_RESYNC_SECONDS; default 10)")
    parser.add_argument("--metrics-port", type=int, default=8082,
                        help="port of the Prometheus /metrics endpoint (0 disables; default 8082)")
    parser.add_argument("--webhook-port", type=int, default=0,
                        help="serve the validating admission webhook on this port (0: no webhook; default 0)")
    parser.add_argument("--webhook-address", default="0.0.0.0", help="address the webhook listens on")
    parser.add_argument("--webhook-cert-dir", default="/etc/shardcdc/webhook",
                        help="directory with the webhook's serving certificate (tls.crt, tls.key)")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return run


def _own_namespace() -> str | None:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return os.environ.get("POD_NAMESPACE")


def run(args: argparse.Namespace) -> int:
    if args.resync_seconds is not None:
        # Before the handlers module is imported: the timer interval is fixed at registration.
        os.environ["SHARDCDC_OPERATOR_RESYNC_SECONDS"] = str(args.resync_seconds)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import kopf

    from cdcoperator.networkpolicy import NetworkPolicyError, load_network_policy
    from cdcoperator.policy import PolicyError, load_policy

    try:
        load_policy()  # a bad $SHARDCDC_OPERATOR_POLICY stops the operator here, in one line
        load_network_policy()  # and a bad $SHARDCDC_OPERATOR_NETWORK_POLICY
    except (PolicyError, NetworkPolicyError) as exc:
        raise SystemExit(f"shardcdc operator: {exc}") from None
    import cdcoperator.handlers  # noqa: F401  (registers the handlers)
    from cdcworker.allocator import tune_for_listing

    tune_for_listing()  # the Deployment lists' parse buffers unmapped on free, not kept in the heap

    if args.webhook_port:
        from pathlib import Path

        from cdcoperator import webhook

        webhook.enable(webhook.WebhookConfig(args.webhook_port, Path(args.webhook_cert_dir), args.webhook_address))

    if args.metrics_port:
        from cdcoperator.metrics import start_metrics_server

        start_metrics_server(args.metrics_port)

    namespaces = list(args.namespace)
    if not args.all_namespaces and not namespaces:
        own = _own_namespace()
        if own is None:
            raise SystemExit("shardcdc operator: give --namespace or --all-namespaces (not running in a pod)")
        namespaces = [own]
    asyncio.run(kopf.operator(
        clusterwide=args.all_namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness or None,
        standalone=True,
    ))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="shardcdc operator")
    return register(parser)(parser.parse_args())
