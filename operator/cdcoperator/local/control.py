"""The control endpoint of a running ``shardcdc run``, and its client (``shardcdc scale``, the demo).

Why an endpoint and not a state file the runner polls: a change is applied by the one process
that owns the connector, immediately and in order, and the caller gets the answer (the new
``metadata.generation``, or why the change was refused, e.g. ``spec.tasks`` below 1) instead of
writing a file that two writers could race on and nobody validates. The endpoint listens on
loopback only, on a free port, and requires a random bearer token; both are in
``<state dir>/<namespace>/<name>/control.json`` (mode 0600), which is how a client finds the
instance by connector name. It speaks a tiny subset of the Kubernetes REST shape:

* ``GET   /apis/shardcdc.io/v1alpha1/namespaces/<ns>/cdcconnectors/<name>``: the connector with status;
* ``PATCH`` the same path with a JSON merge patch of ``spec`` and ``metadata.labels/annotations``;
* ``GET   .../<name>/pods`` and ``.../<name>/events``: the worker pods and the events so far.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from cdcoperator.local.cluster import connector_dir
from cdcoperator.model import GROUP, VERSION, SpecError
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["CONTROL_FILE", "ControlClient", "ControlError", "ControlServer", "default_state_dir"]

CONTROL_FILE = "control.json"
STATE_DIR_ENV = "SHARDCDC_OPERATOR_STATE_DIR"


def default_state_dir() -> Path:
    """``$SHARDCDC_OPERATOR_STATE_DIR``, else ``$XDG_STATE_HOME/shardcdc``, else ``~/.local/state/shardcdc``."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "shardcdc"


def _path(namespace: str, name: str, sub: str = "") -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/cdcconnectors/{name}" + (f"/{sub}" if sub else "")


class ControlError(RuntimeError):
    """The instance is not running, or it refused the request (the message says why)."""


@dataclass
class ControlHandlers:
    """What the server serves; the runner provides these (called on the runner's event loop)."""

    get: Callable[[], JsonMapping | None]
    patch: Callable[[JsonMapping], JsonMapping]  # raises SpecError / KeyError
    # {"status": {...}} of an offsets reset (LocalCluster.clear_generation_record); raises likewise
    patch_status: Callable[[JsonMapping], JsonMapping]
    pods: Callable[[], list[JsonObject]]
    events: Callable[[], list[JsonObject]]


class ControlServer:
    def __init__(self, state_dir: Path, namespace: str, name: str, handlers: ControlHandlers) -> None:
        self.file = connector_dir(state_dir, namespace, name) / CONTROL_FILE
        self.namespace, self.name = namespace, name
        self.handlers = handlers
        self.token = secrets.token_urlsafe(24)
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> ControlServer:
        app = web.Application(middlewares=[self._auth])
        base = _path(self.namespace, self.name)
        app.router.add_get(base, self._get)
        app.router.add_patch(base, self._patch)
        app.router.add_patch(base + "/status", self._patch_status)
        app.router.add_get(base + "/pods", self._pods)
        app.router.add_get(base + "/events", self._events)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # loopback only
        port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{port}"
        self.file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.file.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": self.url, "token": self.token, "pid": os.getpid(),
                       "namespace": self.namespace, "name": self.name}, fh)
        os.replace(self.file.with_suffix(".tmp"), self.file)
        return self

    async def stop(self) -> None:
        try:
            doc = json.loads(self.file.read_text())
            if doc.get("token") == self.token:
                self.file.unlink()
        except (OSError, ValueError):
            pass
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:  # Any: aiohttp's middleware handler (untyped in aiohttp)
        given = request.headers.get("Authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return web.json_response({"message": "unauthorized"}, status=401)
        response: web.StreamResponse = await handler(request)
        return response

    async def _get(self, request: web.Request) -> web.Response:
        body = self.handlers.get()
        if body is None:
            return web.json_response({"message": "not found"}, status=404)
        return web.json_response(body)

    async def _patch(self, request: web.Request) -> web.Response:
        return await self._apply(request, self.handlers.patch)

    async def _patch_status(self, request: web.Request) -> web.Response:
        return await self._apply(request, self.handlers.patch_status)

    @staticmethod
    async def _apply(request: web.Request, handler: Callable[[JsonMapping], JsonMapping]) -> web.Response:
        try:
            patch = await request.json()
            if not isinstance(patch, dict):
                raise SpecError("the patch must be a JSON object")
            return web.json_response(handler(patch))
        except (SpecError, ValueError) as exc:
            return web.json_response({"message": str(exc)}, status=422)
        except KeyError as exc:
            return web.json_response({"message": str(exc)}, status=404)

    async def _pods(self, request: web.Request) -> web.Response:
        return web.json_response({"items": self.handlers.pods()})

    async def _events(self, request: web.Request) -> web.Response:
        return web.json_response({"items": self.handlers.events()})


class ControlClient:
    """Talks to a running ``shardcdc run`` found by connector name under the state directory."""

    def __init__(self, url: str, token: str, namespace: str, name: str, timeout: float = 10.0,
                 pid: int | None = None) -> None:
        self.url, self.token, self.namespace, self.name, self.timeout = url, token, namespace, name, timeout
        self.pid = pid  # the instance's process, from control.json: tells a stale file from a hung instance

    @classmethod
    def find(cls, name: str, namespace: str = "default", state_dir: Path | None = None) -> ControlClient:
        try:
            path = connector_dir(state_dir or default_state_dir(), namespace, name) / CONTROL_FILE
        except SpecError as exc:
            raise ControlError(f"no cdcconnector {namespace}/{name}: {exc}") from None
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise ControlError(f"no running `shardcdc run` for cdcconnector {namespace}/{name} "
                               f"(no {path})") from None
        except ValueError as exc:
            raise ControlError(f"{path} is not valid JSON: {exc}") from None
        return cls(doc["url"], doc["token"], namespace, name, pid=int(doc["pid"]) if doc.get("pid") else None)

    def _call(self, method: str, sub: str = "", body: object = None) -> JsonObject:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + _path(self.namespace, self.name, sub), data=data, method=method,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/merge-patch+json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as exc:
            try:
                message = json.load(exc).get("message", "")
            except ValueError:
                message = exc.reason
            raise ControlError(f"{method} refused (HTTP {exc.code}): {message}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ControlError(f"cannot reach `shardcdc run` for {self.namespace}/{self.name} at {self.url}: "
                               f"{exc}") from None
        return dict(doc)

    def get(self) -> JsonObject:
        return self._call("GET")

    def patch(self, patch: JsonMapping) -> JsonObject:
        return self._call("PATCH", body=patch)

    def patch_status(self, status: JsonMapping) -> JsonObject:
        return self._call("PATCH", "status", body={"status": dict(status)})

    def scale(self, tasks: int) -> JsonObject:
        return self.patch({"spec": {"tasks": tasks}})

    def pods(self) -> list[JsonObject]:
        return list(self._call("GET", "pods").get("items") or [])

    def events(self) -> list[JsonObject]:
        return list(self._call("GET", "events").get("items") or [])
