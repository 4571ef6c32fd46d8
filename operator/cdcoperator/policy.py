"""The operator's policy: which images and service accounts a CdcConnector may name.

Whoever may create a CdcConnector would otherwise choose what the operator runs (``spec.worker.image``,
the Spark image of a backfill, ``spark.kubernetes.*.container.image`` in ``sparkConf``) and under which
identity (``spec.worker.podTemplate.serviceAccountName``, the Spark driver's ``serviceAccount``), with the
connector's Secrets mounted. The installer decides instead: the Helm chart passes its ``policy`` values
as ``$SHARDCDC_OPERATOR_POLICY`` (JSON); by default only the chart's own worker image repository and no
named service account (workers run under the namespace's default account, with no API token mounted).

Without the variable (an operator started by hand, local mode) nothing is restricted: whoever runs it
already chooses every image. The same check runs in the admission webhook (refused at ``kubectl
apply``) and in every reconcile (refused specs create and run nothing; the webhook may be off or
``failurePolicy: Ignore``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from cdcworker.jsontypes import JsonMapping

__all__ = ["POLICY_ENV", "Policy", "PolicyError", "load_policy", "named_images", "named_service_accounts",
           "repository_of"]

POLICY_ENV = "SHARDCDC_OPERATOR_POLICY"
# Spark settings naming an image or a service account (spark-on-k8s configuration keys).
_SPARK_IMAGE_KEY = re.compile(r"^spark\.kubernetes\.(?:(?:driver|executor)\.)?container\.image$")
_SPARK_ACCOUNT_KEY = re.compile(r"^spark\.kubernetes\.authenticate\..*serviceAccountName$")


def _shown(value: str, limit: int = 256) -> str:
    """``value`` quoted for a message, cut when long (sparkConf values have no length bound)."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f" ... ({len(value)} characters)"


class PolicyError(ValueError):
    """``$SHARDCDC_OPERATOR_POLICY`` is not valid (the operator refuses to start with it)."""


def repository_of(image: str) -> str:
    """The repository of an image reference: without ``@digest`` and without ``:tag``.

    ``registry:5000/team/app:1.2@sha256:...`` -> ``registry:5000/team/app`` (a ``:`` before the last
    ``/`` is a registry port, not a tag).
    """
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


@dataclass(frozen=True, slots=True)
class Policy:
    """``image_repositories``: allowed repositories; an entry ending in ``/*`` allows everything below
    that prefix. ``service_accounts``: names a connector may give; ``*`` allows any."""

    image_repositories: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()

    def image_allowed(self, image: str) -> bool:
        repo = repository_of(image)
        for allowed in self.image_repositories:
            if allowed.endswith("/*") and repo.startswith(allowed[:-1]):
                return True
            if repo == allowed:
                return True
        return False

    def service_account_allowed(self, name: str) -> bool:
        return "*" in self.service_accounts or name in self.service_accounts

    def violations(self, spec: JsonMapping) -> list[str]:
        """One line per refused image or service account of ``spec`` (a CdcConnector's spec), [] if none."""
        out: list[str] = []
        allowed_images = ", ".join(self.image_repositories) or "none"
        for path, image in named_images(spec):
            if not self.image_allowed(image):
                out.append(f"{path}: image {_shown(image)} is not allowed by the operator's policy (allowed "
                           f"repositories: {allowed_images}); use an allowed image or ask the cluster admin to add "
                           f"{_shown(repository_of(image))} to the chart's policy.imageRepositories")
        allowed_accounts = ", ".join(self.service_accounts) or "none"
        for path, account in named_service_accounts(spec):
            if not self.service_account_allowed(account):
                out.append(f"{path}: service account {_shown(account)} is not allowed by the operator's policy (allowed: "
                           f"{allowed_accounts}); remove it or ask the cluster admin to add it to the chart's "
                           "policy.serviceAccounts")
        return out


def _mapping(d: object, *keys: str) -> JsonMapping:
    for key in keys:
        d = d.get(key) if isinstance(d, Mapping) else None
    return d if isinstance(d, Mapping) else {}


def _spark(spec: JsonMapping) -> JsonMapping:
    return _mapping(spec, "snapshot", "backfill", "spark")


def named_images(spec: JsonMapping) -> Iterator[tuple[str, str]]:
    """(field path, image) of every image the spec names itself (defaults are the operator's own)."""
    worker_image = _mapping(spec, "worker").get("image")
    if isinstance(worker_image, str) and worker_image:
        yield "spec.worker.image", worker_image
    spark = _spark(spec)
    if isinstance(spark.get("image"), str) and spark["image"]:
        yield "spec.snapshot.backfill.spark.image", spark["image"]
    for key, value in _mapping(spark, "sparkConf").items():
        if _SPARK_IMAGE_KEY.match(str(key)):
            yield f"spec.snapshot.backfill.spark.sparkConf[{key!r}]", str(value)


def named_service_accounts(spec: JsonMapping) -> Iterator[tuple[str, str]]:
    """(field path, name) of every service account the spec names."""
    account = _mapping(spec, "worker", "podTemplate").get("serviceAccountName")
    if isinstance(account, str) and account:
        yield "spec.worker.podTemplate.serviceAccountName", account
    spark = _spark(spec)
    if isinstance(spark.get("serviceAccount"), str) and spark["serviceAccount"]:
        yield "spec.snapshot.backfill.spark.serviceAccount", spark["serviceAccount"]
    for key, value in _mapping(spark, "sparkConf").items():
        if _SPARK_ACCOUNT_KEY.match(str(key)):
            yield f"spec.snapshot.backfill.spark.sparkConf[{key!r}]", str(value)


def _names(doc: JsonMapping, key: str) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"${POLICY_ENV}: {key} must be a list of non-empty strings, got {json.dumps(value)[:200]}")
    return tuple(value)


def env_json_object(name: str, keys: Sequence[str], error: type[ValueError],
                    env: Mapping[str, str] | None = None) -> JsonMapping | None:
    """The JSON object in ``$name`` with only ``keys`` (None when unset); ``error`` says what is wrong."""
    text = (os.environ if env is None else env).get(name, "").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"${name} is not JSON ({exc})") from None
    if not isinstance(doc, Mapping):
        raise error(f"${name} must be a JSON object with {', '.join(keys[:-1])} and {keys[-1]}")
    unknown = sorted(set(doc) - set(keys))
    if unknown:
        raise error(f"${name}: unknown keys {', '.join(unknown)} (expected {', '.join(keys)})")
    return doc


def load_policy(env: Mapping[str, str] | None = None) -> Policy | None:
    """The policy in ``$SHARDCDC_OPERATOR_POLICY``, or None (no restriction) when it is unset."""
    doc = env_json_object(POLICY_ENV, ("imageRepositories", "serviceAccounts"), PolicyError, env)
    if doc is None:
        return None
    return Policy(_names(doc, "imageRepositories"), _names(doc, "serviceAccounts"))
