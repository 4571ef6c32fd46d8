"""A list + watch cache of one kind in one namespace, for FakeNodes (a controller's informer, small).

FakeNodes used to list every Deployment and pod of its namespace ten times a second: at 1,024
tasks that is megabytes of JSON a pass, encoded by the API server and decoded here, on the same two
cores as the operator it stands beside (``bench/operator_scale.py``). A kubelet and a Deployment
controller watch instead. ``Informer`` lists once, then follows the watch (listing again when the
watch ends or its version expired), keeps the objects by name, and sets ``changed`` on every event,
so a pass runs when something happened and reads memory, not the API server.

Writes by the owner show at once through ``put`` and ``drop`` (write-through): a pass right after a
create must not create again before the watch's ADDED arrives.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiClient

from cdcoperator.podwatch import WATCH_SECONDS, WatchExpired, open_collection, watch_events

RETRY_SECONDS = 0.5


class Informer:
    """Objects of ``path`` (a namespaced collection) matching ``selector``, by name, from a thread."""

    def __init__(self, api: ApiClient, path: str, selector: str, changed: threading.Event) -> None:
        self.api = ApiClient(configuration=api.configuration)  # its own connection: a watch holds one
        self.path, self.selector, self.changed = path, selector, changed
        self.synced = threading.Event()
        self.errors: list[str] = []
        self._items: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resp: Any = None  # Any: urllib3's streaming response of the watch in progress
        self._thread = threading.Thread(target=self._run, name=f"informer-{path.rsplit('/', 1)[-1]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:  # wake the thread's read (urllib3's shutdown is for this)
            with contextlib.suppress(ValueError, OSError):
                resp.shutdown()
        self._thread.join(10)
        self.api.close()

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def put(self, obj: dict[str, Any]) -> None:
        """Keep ``obj``, unless a newer version of it is kept already (a write's answer and the
        watch's event for an older write can arrive in either order)."""
        name = obj["metadata"]["name"]
        with self._lock:
            kept = self._items.get(name)
            if kept is None or _version(kept) <= _version(obj):
                self._items[name] = obj

    def drop(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)

    # --- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch(self._list())
            except WatchExpired:
                continue
            except Exception as exc:  # the connection broke, or the server refused: list again
                if self._stop.is_set():
                    return
                self.errors.append(repr(exc))
                self._stop.wait(RETRY_SECONDS)

    def _request(self, query: dict[str, str]) -> Any:  # Any: the client's response (urllib3's in .response)
        return open_collection(self.api, self.path, {"labelSelector": self.selector, **query})

    def _list(self) -> str:
        doc = json.loads(self._request({}).read())
        with self._lock:
            self._items = {o["metadata"]["name"]: o for o in doc.get("items") or ()}
        self.synced.set()
        self.changed.set()
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> None:
        while not self._stop.is_set():
            query = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                     "timeoutSeconds": str(WATCH_SECONDS)}
            self._resp = self._request(query).response
            try:
                for kind, obj in watch_events(self._resp):
                    version = self._event(kind, obj, version)
            finally:
                self._resp.release_conn()
                self._resp = None

    def _event(self, kind: str, obj: Mapping[str, Any], version: str) -> str:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return version
        if kind == "DELETED":
            self.drop(obj["metadata"]["name"])
        else:
            self.put(dict(obj))
        self.changed.set()
        return version


def _version(obj: dict[str, Any]) -> int:
    """The object's resourceVersion as a number (etcd's revision; opaque to clients in general,
    which is fine for this test stand-in: an unreadable one counts as the newest)."""
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 1 << 62
