"""Thin, idempotent adapters between a Plan and the API server.

Objects are plain dicts (what the builders produce and the API returns) and every call goes
through :class:`KubeApi`, a small JSON client over the ``kubernetes`` package's configured
transport (kubeconfig or in-cluster). The blocking calls run in worker threads.

Idempotency: children have deterministic names and are created, or patched when the hash of what
we want (``shardcdc.io/applied-hash``) differs from the live object's, so re-applying an unchanged
plan sends no writes at all. Status is patched only when it differs from the stored one.

Removals: a JSON merge patch only removes a map key it sets to null, so each child also records
the map keys we applied (``shardcdc.io/applied-keys``, keys only: no values, no secrets), and the
next patch nulls those we no longer want (a pod-template label or node selector taken out of the
spec), as kubectl's three-way apply does; keys others added (a restart annotation) are kept.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from cdcoperator import naming
from cdcoperator.model import GROUP, VERSION
from cdcworker.jsontypes import JsonMapping, JsonObject

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "APPLIED_HASH_ANNOTATION",
    "APPLIED_KEYS_ANNOTATION",
    "ApiError",
    "ClusterApi",
    "Kind",
    "KubeApi",
    "applied_hash",
    "is_applied",
    "new_api_client",
    "prepare_apply",
]

APPLIED_HASH_ANNOTATION = f"{naming.PREFIX}/applied-hash"
APPLIED_KEYS_ANNOTATION = f"{naming.PREFIX}/applied-keys"
PLURAL = "cdcconnectors"
DEFAULT_REQUEST_TIMEOUT = 30.0
# A list of the objects' metadata only (labels, annotations): what the reconcile reads of ConfigMaps.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
# API calls in flight at once (SHARDCDC_OPERATOR_API_CONCURRENCY). A generation of N tasks is 2N
# objects to create (and 2N to delete when it has exited): one at a time through kopf's 4
# default-executor threads and urllib3's 4 pooled connections, 256 shards took ~8 s of ~15 ms calls
# (issue 30). The calls are independent, each idempotent (applied-hash), and the status record
# that announces them is written before any of them (reconcile._record_ahead), so doing them
# concurrently changes nothing but the time; the bound keeps the API server's load predictable.
DEFAULT_API_CONCURRENCY = 16
API_CONCURRENCY_ENV = "SHARDCDC_OPERATOR_API_CONCURRENCY"  # the chart's operator.apiConcurrency


# A generation's deletecollection split over at most this many concurrent calls (at least
# DELETE_COLLECTION_MIN tasks each): the API server deletes a collection's objects serially.
DELETE_COLLECTION_CALLS = 8
DELETE_COLLECTION_MIN = 16


def split_evenly(items: Sequence[int], parts: int, least: int = DELETE_COLLECTION_MIN) -> list[list[int]]:
    """``items`` in at most ``parts`` contiguous runs of near-equal size, each of ``least`` or more
    (fewer runs when there are few items; none when there are none) (pure)."""
    n = min(parts, max(1, len(items) // least)) if items else 0
    return [list(items[i * len(items) // n:(i + 1) * len(items) // n]) for i in range(n)]


def api_concurrency(env: Mapping[str, str] = os.environ) -> int:
    """The operator setting: API calls in flight at once (``DEFAULT_API_CONCURRENCY`` when unset)."""
    raw = env.get(API_CONCURRENCY_ENV, "").strip()
    if not raw:
        return DEFAULT_API_CONCURRENCY
    if not raw.isdigit() or not 1 <= int(raw) <= 256:
        raise ValueError(f"{API_CONCURRENCY_ENV}={raw!r}: must be a whole number from 1 to 256 "
                         f"(API requests in flight at once; unset for {DEFAULT_API_CONCURRENCY})")
    return int(raw)


def _key_tree(value: JsonMapping) -> JsonObject:
    """The map keys of ``value``, nested (a leaf or a list is 0): what a later patch may need to null."""
    return {k: _key_tree(v) if isinstance(v, Mapping) else 0 for k, v in value.items()}


def _null_removed(patch: JsonObject, applied: JsonMapping) -> None:
    """Set to null, in ``patch``, each key of ``applied`` (a key tree) that ``patch`` no longer has."""
    for k, sub in applied.items():
        if k not in patch:
            patch[k] = None
        elif isinstance(sub, Mapping) and isinstance(patch[k], dict):
            _null_removed(patch[k], sub)


def _applied_digest(live: JsonMapping) -> str | None:
    digest = ((live.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH_ANNOTATION)
    return digest if isinstance(digest, str) else None


def _only_replicas_differ(live: JsonMapping, obj: JsonMapping, digest: str) -> bool:
    """``live`` is what we applied of ``obj`` but for ``spec.replicas`` (ours or changed since)."""
    applied = _applied_digest(live)
    if applied == digest:
        return True  # replicas changed by a stop or a ``kubectl scale`` (is_applied said no)
    spec = obj.get("spec") or {}
    live_replicas = (live.get("spec") or {}).get("replicas")
    if applied is None or "replicas" not in spec or live_replicas is None:
        return False
    return applied_hash({**obj, "spec": {**spec, "replicas": live_replicas}}) == applied


def is_applied(live: JsonMapping, obj: JsonMapping, digest: str) -> bool:
    """``live`` is what we applied last and still runs the replicas ``obj`` wants. The replica count
    is compared as well: stopping a worker (``set_replicas``) or a ``kubectl scale`` changes it
    without the hash, and a later apply of the same object must bring it back."""
    if _applied_digest(live) != digest:
        return False
    wanted = (obj.get("spec") or {}).get("replicas")
    return wanted is None or (live.get("spec") or {}).get("replicas") == wanted


def prepare_apply(obj: JsonMapping, live: JsonMapping | None) -> tuple[JsonObject, JsonObject, str]:
    """(the object to create, the merge patch to send to ``live``, the applied hash) for ``obj``.

    The patch carries the whole desired labels, annotations, spec and data (lists replace the live
    ones wholesale) plus a null for every map key the previous apply recorded that ``obj`` dropped."""
    digest = applied_hash(obj)
    desired: JsonObject = json.loads(json.dumps(obj))
    ours = {k: v for k, v in desired.items() if k in ("spec", "data")}
    meta = desired["metadata"]
    ours["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    annotations = meta.setdefault("annotations", {})
    annotations[APPLIED_HASH_ANNOTATION] = digest
    annotations[APPLIED_KEYS_ANNOTATION] = json.dumps(_key_tree(ours), separators=(",", ":"), sort_keys=True)
    patch = {k: v for k, v in desired.items() if k in ("metadata", "spec", "data")}
    patch["metadata"] = {k: v for k, v in meta.items() if k not in ("name", "namespace")}
    previous = (((live or {}).get("metadata") or {}).get("annotations") or {}).get(APPLIED_KEYS_ANNOTATION)
    if previous:
        with contextlib.suppress(ValueError, TypeError, AttributeError):  # not ours to trust: no removals
            applied = json.loads(previous)
            if isinstance(applied, dict):
                _null_removed(patch, applied)
    return desired, patch, digest


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        message = body
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(body).get("message", body)
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Kind:
    """Where a namespaced kind lives in the REST tree."""

    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str

    def path(self, namespace: str, name: str = "", sub: str = "") -> str:
        out = f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        if name:
            out += f"/{name}"
        if sub:
            out += f"/{sub}"
        return out


DEPLOYMENTS = Kind("/apis/apps/v1", "deployments")
CONFIG_MAPS = Kind("/api/v1", "configmaps")
CONNECTORS = Kind(f"/apis/{GROUP}/{VERSION}", PLURAL)
NETWORK_POLICIES = Kind("/apis/networking.k8s.io/v1", "networkpolicies")
KINDS = {"Deployment": DEPLOYMENTS, "ConfigMap": CONFIG_MAPS, "NetworkPolicy": NETWORK_POLICIES}


def applied_hash(obj: JsonMapping) -> str:
    """A digest of everything we set on a child (labels, annotations, owners, spec, data)."""
    meta = obj.get("metadata") or {}
    essence = {
        # Bumped when what apply writes besides ``obj`` changes: every child is then patched once
        # (2: the applied-keys annotation, which older children lack).
        "format": 2,
        "labels": meta.get("labels"),
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                        if k not in (APPLIED_HASH_ANNOTATION, APPLIED_KEYS_ANNOTATION)},
        "ownerReferences": meta.get("ownerReferences"),
        "spec": obj.get("spec"),
        "data": obj.get("data"),
    }
    return hashlib.sha256(json.dumps(essence, sort_keys=True).encode()).hexdigest()[:32]


class ClusterApi(Protocol):
    """The API-server calls ``reconcile()`` makes: :class:`KubeApi` in a cluster, ``LocalCluster`` in local mode."""

    async def get_connector(self, namespace: str, name: str) -> JsonObject | None: ...

    async def patch_connector_status(self, namespace: str, name: str, status: JsonMapping) -> None: ...

    async def remove_annotation(self, namespace: str, name: str, key: str, expected: str) -> None: ...

    async def list_children(self, kind: Kind, namespace: str, connector: str,
                            metadata_only: bool = False) -> list[JsonObject]:
        """The connector's children of ``kind``; ``metadata_only``: their metadata is all the caller reads."""
        ...

    async def apply(self, obj: JsonMapping, live: JsonMapping | None) -> str: ...

    async def set_replicas(self, namespace: str, name: str, replicas: int) -> None: ...

    async def annotate_pod_template(self, namespace: str, name: str, key: str, value: str) -> None: ...

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool: ...

    async def delete_generation(self, kind: Kind, namespace: str, connector: str, generation: int,
                                tasks: Sequence[int] = ()) -> list[str]:
        """Delete every ``kind`` child of one generation of the connector; returns the names deleted.
        ``tasks``: the generation's task ids as listed, over which the work may be split; empty: unknown."""
        ...

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's data (None: no such Secret); discovery of a TLS or credentialed source."""
        ...

    # Backfills (cdcoperator.backfill): objects of other kinds, selected by their own labels.

    async def list_labelled(self, kind: Kind, namespace: str, selector: str) -> list[JsonObject]: ...

    async def create(self, kind: Kind, obj: JsonMapping) -> JsonObject | None: ...


def _decode(raw: bytes) -> JsonObject:
    decoded: JsonObject = orjson.loads(raw) if raw else {}
    return decoded


def new_api_client(kubeconfig: str | None = None, concurrency: int | None = None) -> ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``),
    with one pooled connection per concurrent call (urllib3's default of 4 would queue the rest)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    cfg.connection_pool_maxsize = api_concurrency() if concurrency is None else max(1, concurrency)
    try:
        if kubeconfig is not None:
            raise config.ConfigException("explicit kubeconfig")
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return client.ApiClient(cfg)


class KubeApi:
    """JSON-in, JSON-out calls on the API server; async wrappers run the blocking client in a pool of
    ``concurrency`` threads of its own (default: the operator setting, ``api_concurrency``) (not the loop's default executor, which kopf sizes for sync
    handlers), so at most that many calls are in flight and the rest queue."""

    def __init__(self, api: ApiClient, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 concurrency: int | None = None) -> None:
        self.api = api
        self.request_timeout = request_timeout
        self.concurrency = api_concurrency() if concurrency is None else max(1, concurrency)
        self.pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="kube-api")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    # --- transport ------------------------------------------------------------------------------------

    def fetch(
        self,
        method: str,
        path: str,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        allow: Iterable[int] = (),
        accept: str = "application/json",
    ) -> bytes | None:
        """The response's body, undecoded (None: its status is in ``allow``); raises ApiError on any
        other status outside 2xx."""
        url_path = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method_, url, headers_, body_, post = self.api.param_serialize(
            method, url_path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        resp = self.api.call_api(method_, url, headers_, body_, post, _request_timeout=self.request_timeout)
        raw = resp.read()
        if resp.status in allow:
            return None
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, method, path, raw.decode() if isinstance(raw, bytes) else str(raw or ""))
        return raw if isinstance(raw, bytes) else str(raw or "").encode()

    def request(self, method: str, path: str, body: object = None, **kwargs: Any) -> JsonObject | None:  # Any: fetch's keyword arguments, passed on
        """A blocking call and its decoded JSON ({} for an empty body; None for a status in ``allow``)."""
        raw = self.fetch(method, path, body, **kwargs)
        return None if raw is None else _decode(raw)

    async def call(self, method: str, path: str, body: Any = None, decode: bool = True,
                   **kwargs: Any) -> JsonObject | None:  # Any: a request body (JSON or a patch) and fetch's keyword arguments, passed on
        """A call on the client's pool; ``decode=False``: {} on success, without parsing the object the
        API server sends back (a write's answer: ~3,000 objects decoded per scale at 1,024 tasks for
        nothing).

        The answer is decoded here, on the loop's thread, with orjson: decoding the Deployment list
        each reconcile is the operator's largest CPU cost at 1,024 tasks (py-spy, issue 30), but
        orjson decoding megabytes in the 16 client threads raised the operator's RSS holding
        10 x 256 tasks from 253 to 330 MiB (each thread's malloc arena keeping its parse buffers);
        on one thread they are one arena's."""
        call = functools.partial(self.fetch, method, path, body, **kwargs)
        raw = await asyncio.get_running_loop().run_in_executor(self.pool, call)
        if raw is None:
            return None
        return _decode(raw) if decode else {}

    # --- the connector ----------------------------------------------------------------------------------

    async def get_connector(self, namespace: str, name: str) -> JsonObject | None:
        return await self.call("GET", CONNECTORS.path(namespace, name), allow=(404,))

    async def patch_connector_status(self, namespace: str, name: str, status: JsonMapping) -> None:
        await self.call("PATCH", CONNECTORS.path(namespace, name, "status"), {"status": dict(status)},
                        content_type="application/merge-patch+json")

    async def remove_annotation(self, namespace: str, name: str, key: str, expected: str) -> None:
        """Remove a one-shot annotation, only if it still has the value we acted on (JSON patch test)."""
        pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        ops = [{"op": "test", "path": pointer, "value": expected}, {"op": "remove", "path": pointer}]
        await self.call("PATCH", CONNECTORS.path(namespace, name), ops, content_type="application/json-patch+json",
                        allow=(404, 409, 422))

    # --- children ---------------------------------------------------------------------------------------

    async def list_children(self, kind: Kind, namespace: str, connector: str,
                            metadata_only: bool = False) -> list[JsonObject]:
        selector = ",".join(f"{k}={v}" for k, v in naming.selector_labels(connector).items())
        out = await self.call("GET", kind.path(namespace), query={"labelSelector": selector},
                              accept=METADATA_LIST if metadata_only else "application/json")
        return list((out or {}).get("items") or [])

    async def apply(self, obj: JsonMapping, live: JsonMapping | None) -> str:
        """Create ``obj`` or bring ``live`` to it; returns "created", "patched" or "unchanged"."""
        kind = KINDS[obj["kind"]]
        meta = obj["metadata"]
        if live is not None and is_applied(live, obj, digest := applied_hash(obj)):
            # Every reconcile re-applies every task's two objects and nearly all are unchanged: at
            # 256 tasks, building each one's copy, key tree and patch first cost a resync more CPU
            # than anything but reading the workers' status (issue 30's profile); the hash decides.
            return "unchanged"
        if live is not None and _only_replicas_differ(live, obj, digest):
            # A drain stops every worker of a generation: patch the replica count alone, not the
            # whole object again for the API server to merge and compare (the hash then is that of
            # ``obj``, as a full apply would have left it).
            replicas = int(obj["spec"]["replicas"])
            await self.call("PATCH", kind.path(meta["namespace"], meta["name"]),
                            {"metadata": {"annotations": {APPLIED_HASH_ANNOTATION: digest}},
                             "spec": {"replicas": replicas}}, content_type="application/merge-patch+json", decode=False)
            return "patched"
        desired, patch, digest = prepare_apply(obj, live)
        if live is None:
            created = await self.call("POST", kind.path(meta["namespace"]), desired, allow=(409,), decode=False)
            if created is not None:
                return "created"
            live = await self.call("GET", kind.path(meta["namespace"], meta["name"]))
            assert live is not None
            desired, patch, digest = prepare_apply(obj, live)
        if is_applied(live, obj, digest):
            return "unchanged"
        # A merge patch of the whole desired object: lists (containers, volumes) are replaced
        # wholesale; map keys others added (e.g. a restart annotation on the template) are kept,
        # those we applied before and dropped since are nulled (prepare_apply).
        await self.call("PATCH", kind.path(meta["namespace"], meta["name"]), patch,
                        content_type="application/merge-patch+json", decode=False)
        return "patched"

    async def set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        await self.call("PATCH", DEPLOYMENTS.path(namespace, name), {"spec": {"replicas": replicas}},
                        content_type="application/merge-patch+json", allow=(404,), decode=False)

    async def annotate_pod_template(self, namespace: str, name: str, key: str, value: str) -> None:
        """``kubectl rollout restart``: a changed template annotation makes the Deployment recreate its pod."""
        patch = {"spec": {"template": {"metadata": {"annotations": {key: value}}}}}
        await self.call("PATCH", DEPLOYMENTS.path(namespace, name), patch,
                        content_type="application/merge-patch+json", allow=(404,), decode=False)

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Delete (background propagation: the garbage collector removes pods); False if already gone."""
        out = await self.call("DELETE", kind.path(namespace, name), {"propagationPolicy": "Background"},
                              allow=(404,), decode=False)
        return out is not None

    async def delete_generation(self, kind: Kind, namespace: str, connector: str, generation: int,
                                tasks: Sequence[int] = ()) -> list[str]:
        """``deletecollection`` by the generation's labels (background propagation), answered as
        metadata only: an exited generation of 1,024 tasks was 2,048 DELETE calls, each a round trip
        with its own authorisation and answer, on the path from scale to the new generation Ready.
        The API server deletes a collection's objects one after another (``--delete-collection-
        workers`` is 1 by default: ~4 ms an object here), so the listed ``tasks`` are split over
        concurrent calls (``task in (…)``); the caller holds the connector's lock, so nothing of the
        generation appears beside what it listed."""
        base = ",".join(f"{k}={v}" for k, v in naming.generation_labels(connector, generation).items())
        selectors = [f"{base},{naming.LABEL_TASK} in ({','.join(map(str, part))})"
                     for part in split_evenly(sorted(set(tasks)), DELETE_COLLECTION_CALLS)] or [base]

        async def one(selector: str) -> list[str]:
            out = await self.call("DELETE", kind.path(namespace), {"propagationPolicy": "Background"},
                                  query={"labelSelector": selector}, accept=METADATA_LIST)
            return [str(item["metadata"]["name"]) for item in (out or {}).get("items") or ()]

        return sorted(name for names in await asyncio.gather(*map(one, selectors)) for name in names)

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's data; raises ApiError 403 without ``rbac.sourceSecrets`` (the caller says so)."""
        out = await self.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", allow=(404,))
        if out is None:
            return None
        return {k: base64.b64decode(v) for k, v in (out.get("data") or {}).items()}

    async def list_labelled(self, kind: Kind, namespace: str, selector: str) -> list[JsonObject]:
        """Objects matching a label selector; [] when the kind is not served (404: e.g. no spark-operator
        CRD) or not granted (403: that backfill engine's RBAC is switched off in the chart)."""
        out = await self.call("GET", kind.path(namespace), query={"labelSelector": selector}, allow=(403, 404))
        return list((out or {}).get("items") or [])

    async def create(self, kind: Kind, obj: JsonMapping) -> JsonObject | None:
        """Create ``obj`` as it is (no applied hash: created once, never patched); None if it exists (409)."""
        return await self.call("POST", kind.path(obj["metadata"]["namespace"]), dict(obj), allow=(409,))
