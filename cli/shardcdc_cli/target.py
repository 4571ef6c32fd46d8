"""Which connector a day-2 command acts on, and where its Kafka and offsets are.

Three sources, in this order of preference:

* a CdcConnector in a cluster (``NAME`` with ``-n``/``--kubeconfig``/``--context``): the resource's
  ``spec.kafka`` gives the bootstrap servers and the offsets topic, its status says whether it is
  stopped;
* a file (``-f``): a CdcConnector YAML (local mode uses the same file) or a worker ``.properties``;
* flags alone (``--bootstrap-servers``, ``--offsets-topic``) with ``--local``.

Credentials never come from the cluster (the CLI does not read Secrets): a secured Kafka needs
``--command-config`` (a properties file of Kafka client settings, Java or librdkafka names, as the
worker takes them) or ``-X key=value``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from cdcoperator.apply import KubeApi
from cdcworker.config.kafkaclient import ClientSettingError, librdkafka_settings
from cdcworker.config.loader import parse_properties
from cdcworker.jsontypes import JsonMapping, JsonObject

if TYPE_CHECKING:
    from cdcoperator.apply import KubeApi

__all__ = ["Target", "TargetError", "add_kafka_arguments", "add_kube_arguments", "kube_api", "resolve"]

CONNECTORS_PATH = "/apis/shardcdc.io/v1alpha1/namespaces/{namespace}/cdcconnectors"
DEFAULT_OFFSETS_TOPIC = "shardcdc-offsets"


class TargetError(RuntimeError):
    """The connector or its Kafka cannot be found (the message says which flag is missing)."""


@dataclass
class Target:
    name: str
    namespace: str | None
    client_config: dict[str, str]
    offsets_topic: str
    topic_prefix: str | None
    body: JsonMapping | None = None  # the CdcConnector as read from the cluster
    source: str = "flags"  # "cluster" | "file" | "flags"
    notes: list[str] = field(default_factory=list)


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", help="namespace of the CdcConnector (default: the context's)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--file", help="a CdcConnector YAML or a worker .properties file instead of the cluster")
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default: the connector's)")
    parser.add_argument("--offsets-topic", help="offsets topic (default: the connector's)")
    parser.add_argument("--command-config", help="properties file of Kafka client settings (security, SASL, TLS)")
    parser.add_argument("-X", dest="client_properties", action="append", default=[], metavar="KEY=VALUE",
                        help="one Kafka client setting (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="Kafka timeout in seconds (default 30)")


def kube_api(kubeconfig: str | None, context: str | None) -> tuple[KubeApi, str]:
    """An API client and the default namespace (in-cluster, else the kubeconfig's context)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    namespace = "default"
    try:
        if kubeconfig or context:
            raise config.ConfigException("explicit kubeconfig")
        config.load_incluster_config(client_configuration=cfg)
        ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if ns_file.exists():
            namespace = ns_file.read_text().strip() or namespace
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        except (config.ConfigException, OSError) as exc:
            raise TargetError(f"no Kubernetes cluster: {exc} (use -f FILE or --local for a connector "
                              "outside a cluster)") from None
        chosen = next((c for c in contexts if c["name"] == context), active) if context else active
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or namespace
    return KubeApi(client.ApiClient(cfg)), namespace


def _client_settings(args: argparse.Namespace) -> JsonObject:

    out: JsonObject = {}
    if args.command_config:
        for _line, key, value in parse_properties(Path(args.command_config).read_text()):
            out[key] = value
    for item in args.client_properties:
        key, sep, value = item.partition("=")
        if not sep:
            raise TargetError(f"-X {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def _from_spec(name: str, namespace: str | None, body: JsonMapping, source: str) -> Target:
    kafka = (body.get("spec") or {}).get("kafka") or {}
    config: dict[str, str] = {}
    if kafka.get("bootstrapServers"):
        config["bootstrap.servers"] = kafka["bootstrapServers"]
    if kafka.get("securityProtocol") and kafka["securityProtocol"] != "PLAINTEXT":
        config["security.protocol"] = kafka["securityProtocol"]
    return Target(name, namespace, config, str(kafka.get("offsetsTopic") or DEFAULT_OFFSETS_TOPIC),
                  kafka.get("topicPrefix"), body=body, source=source)


def _from_file(path: str) -> Target:
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml", ".json")):
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, Mapping) and d.get("kind") == "CdcConnector"]
        if len(docs) != 1:
            raise TargetError(f"{path}: expected exactly one CdcConnector, found {len(docs)}")
        meta = docs[0].get("metadata") or {}
        return _from_spec(str(meta.get("name") or ""), meta.get("namespace"), docs[0], "file")

    props = {k: v for _line, k, v in parse_properties(text)}
    config = {"bootstrap.servers": props["bootstrap.servers"]} if "bootstrap.servers" in props else {}
    return Target(props.get("name", ""), None, config, props.get("offset.storage.topic", DEFAULT_OFFSETS_TOPIC),
                  props.get("topic.prefix"), source="file")


def resolve(args: argparse.Namespace, name: str | None, *, local: bool) -> Target:
    """The connector the command acts on; flags override what the resource or file says."""
    if args.file:
        target = _from_file(args.file)
        if name and target.name and name != target.name:
            raise TargetError(f"{args.file} describes connector {target.name!r}, not {name!r}")
        target.name = name or target.name
    elif local:
        if not name:
            raise TargetError("give the connector NAME")
        target = Target(name, None, {}, DEFAULT_OFFSETS_TOPIC, None, source="flags")
    else:
        if not name:
            raise TargetError("give the connector NAME (or -f FILE)")
        api, default_ns = kube_api(args.kubeconfig, args.context)
        namespace = args.namespace or default_ns
        try:
            body = api.request("GET", CONNECTORS_PATH.format(namespace=namespace) + f"/{name}", allow=(404,))
        finally:
            api.api.close()
        if body is None:
            raise TargetError(f"CdcConnector {namespace}/{name} not found")
        target = _from_spec(name, namespace, body, "cluster")
    if not target.name:
        raise TargetError("the connector has no name")
    if args.bootstrap_servers:
        target.client_config["bootstrap.servers"] = args.bootstrap_servers
    if args.offsets_topic:
        target.offsets_topic = args.offsets_topic
    target.client_config.update(_client_settings(args))
    if "bootstrap.servers" not in target.client_config:
        raise TargetError("no Kafka bootstrap servers: give --bootstrap-servers")

    try:  # the same Java names as the worker's (a Kafka CLI --command-config file works as is)
        target.client_config = dict(librdkafka_settings(target.client_config))
    except ClientSettingError as exc:
        raise TargetError(f"Kafka client settings: {exc}") from None
    return target
