"""A connector run by ``shardcdc run`` (local mode), as ``status`` and ``offsets`` see it.

A running instance answers on its control endpoint, the one ``shardcdc scale`` uses (address and
token in ``<state dir>/<namespace>/<name>/control.json``), with the connector and its live status
(generation, assignment, conditions) in the API server's shape. When no instance runs,
``connector.json`` next to it holds the connector and the last status the instance saved. Worker
processes are bound to their instance (they die with it), so no instance means no worker.

A ``control.json`` whose endpoint does not answer was left by a killed instance only if its
process is gone; if the process lives, the instance is hung and nothing is known of its workers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from cdcoperator.local.cluster import STATE_FILE, connector_dir
from cdcoperator.local.control import ControlClient, ControlError, default_state_dir
from cdcworker.jsontypes import JsonMapping

__all__ = ["LocalConnector", "LocalModeError", "find_local", "local_names", "state_dir"]


class LocalModeError(RuntimeError):
    """An instance runs but cannot be asked, or its state file is unreadable (the message says which)."""


@dataclass(frozen=True)
class LocalConnector:
    namespace: str
    name: str
    body: JsonMapping  # the CdcConnector with status, as the instance has (or last saved) it
    running: bool
    where: str  # the control endpoint's URL when running, else the state file


def state_dir(given: Path | None) -> Path:
    """``--state-dir``, else the default ``shardcdc run`` uses."""

    return given if given is not None else default_state_dir()


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def find_local(name: str, namespace: str, root: Path, timeout: float = 10.0) -> LocalConnector | None:
    """The connector as its running instance reports it, else as saved; None if ``root`` has neither."""

    try:
        folder = connector_dir(root, namespace, name)
    except ValueError as exc:  # SpecError: a name Kubernetes would refuse
        raise LocalModeError(f"no connector {namespace}/{name}: {exc}") from None
    try:
        client = ControlClient.find(name, namespace, root)
    except ControlError:
        client = None  # no control.json: no instance runs (an unreadable one is treated alike)
    if client is not None:
        client.timeout = timeout
        try:
            return LocalConnector(namespace, name, client.get(), True, client.url)
        except ControlError as exc:
            if _alive(client.pid):
                raise LocalModeError(f"`shardcdc run` for {namespace}/{name} runs (pid {client.pid}) but does not "
                                     f"answer: {exc}") from None
    path = folder / STATE_FILE
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LocalModeError(f"cannot read {path}: {exc}") from None
    return LocalConnector(namespace, name, body, False, str(path))


def local_names(root: Path, namespace: str | None) -> list[tuple[str, str]]:
    """(namespace, name) of every connector ``shardcdc run`` has run under ``root`` (one namespace or all)."""

    namespaces = [root / namespace] if namespace is not None else sorted(p for p in root.glob("*") if p.is_dir())
    return [(ns.name, d.name) for ns in namespaces for d in sorted(ns.glob("*")) if (d / STATE_FILE).is_file()]
