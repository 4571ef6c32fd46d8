"""``shardcdc status``: a connector's generation, tasks, shards, positions and lag.

Three sources:

* the cluster (default): CdcConnector resources, read through the kubeconfig; everything shown
  comes from ``status`` as the operator wrote it (conditions, ``assignment.taskStates``, shards);
* local mode (``--local``): the connectors ``shardcdc run`` runs or ran under the state directory,
  from a running instance's control endpoint (live status), else from its saved state file; the
  same status, written by the same reconcile, in the same table;
* workers (``--url``, repeatable): each worker's ``/status`` document, e.g. the tasks of a local-mode
  connector or port-forwarded pods; per-shard positions and lag come from the workers themselves.

``--json`` prints the raw documents for scripts. Exit code 0 when every connector shown is Ready
(or every worker is streaming), 1 otherwise (a local-mode connector whose ``shardcdc run`` is not
running is not Ready, whatever its saved status says), 2 when nothing could be read.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cdcworker.jsontypes import JsonMapping, JsonObject
from shardcdc_cli.localmode import LocalConnector, LocalModeError, find_local, local_names, state_dir
from shardcdc_cli.target import CONNECTORS_PATH, TargetError, add_kube_arguments, kube_api

__all__ = ["fetch_worker_status", "register", "render_connector", "render_workers"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("name", nargs="?", help="one connector (default: every connector of the namespace)")
    add_kube_arguments(parser)
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="connectors of every namespace")
    parser.add_argument("--local", action="store_true",
                        help="connectors of `shardcdc run` (local mode; -n defaults to 'default') instead of the cluster")
    parser.add_argument("--state-dir", type=Path, default=None, help="the state directory given to `shardcdc run`")
    parser.add_argument("--url", action="append", default=[],
                        help="a worker's status endpoint (http://host:port, repeatable) instead of the cluster")
    parser.add_argument("--json", action="store_true", help="print the documents as JSON")
    parser.add_argument("--timeout", type=float, default=5.0, help="HTTP timeout per worker (default 5 s)")
    return run


def _cond(status: JsonMapping, type_: str) -> JsonMapping:
    for c in status.get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return {}


def render_connector(body: JsonMapping, console: Console, source: str | None = None) -> bool:
    """Print one CdcConnector (``source``: where it was read, when not the cluster); True when it is
    Ready for its current spec."""
    meta, spec, status = body.get("metadata") or {}, body.get("spec") or {}, body.get("status") or {}
    ready = _cond(status, "Ready")
    current = status.get("observedGeneration") == meta.get("generation")
    ok = ready.get("status") == "True" and current
    a = status.get("assignment") or {}
    shards = status.get("shards") or {}
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("connector", f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    if source is not None:
        head.add_row("source", source)
    head.add_row("state", f"{spec.get('state', 'running')} (spec.tasks {spec.get('tasks', 1)})")
    head.add_row("ready", f"{'[green]' if ok else '[red]'}{ready.get('status', 'Unknown')}[/] "
                          f"{ready.get('reason', '')}: {ready.get('message', '')}"
                          + ("" if current else " [yellow](spec changed; not observed yet)[/]"))
    head.add_row("generation", f"{a.get('generation', '-')} ({a.get('phase', '-')}; previous tasks "
                               f"{a.get('previousTasks', '-')})")
    head.add_row("shards", f"{', '.join(shards.get('serving') or []) or '-'} "
                           f"({shards.get('servingCount', 0)} serving)")
    head.add_row("lag", str(status.get("lag") or "-"))
    for type_ in ("Progressing", "Degraded", "Resharding", "BackfillRunning"):
        c = _cond(status, type_)
        if c.get("status") == "True":
            head.add_row(type_.lower(), f"{c.get('reason', '')}: {c.get('message', '')}")
    console.print(head)
    tasks = Table(title_justify="left")
    for col in ("task", "shards", "phase", "pod", "position", "lag"):
        tasks.add_column(col)
    for t in a.get("taskStates") or ():
        tasks.add_row(str(t.get("id")), ", ".join(t.get("shards") or ()), str(t.get("phase", "")),
                      str(t.get("pod") or "-"), str(t.get("position") or "-"), str(t.get("lag") or "-"))
    if a.get("taskStates"):
        console.print(tasks)
    return ok


def fetch_worker_status(url: str, timeout: float) -> JsonObject:
    base = url.rstrip("/")
    if not base.endswith("/status"):
        base += "/status"
    with urllib.request.urlopen(base, timeout=timeout) as resp:
        doc: JsonObject = json.load(resp)
    return doc


def _lag(ms: Any) -> str:  # Any: a lag field of the worker's /status JSON (int, float or absent)
    return "-" if ms is None else f"{int(ms) / 1000:.1f}s"


def render_workers(docs: Sequence[tuple[str, JsonMapping | str]], console: Console) -> bool:
    """Print the workers' status documents (or the error reaching them); True if all stream."""
    table = Table(title="workers", title_justify="left")
    for col in ("worker", "connector", "task", "gen", "state", "shard", "position", "lag", "events"):
        table.add_column(col)
    ok = True
    for url, doc in docs:
        if isinstance(doc, str):
            ok = False
            table.add_row(url, "-", "-", "-", f"[red]unreachable[/]: {doc}", "", "", "", "")
            continue
        ok = ok and doc.get("state") == "streaming"
        shards = doc.get("shards") or [{}]
        for i, s in enumerate(shards):
            first = i == 0
            table.add_row(url if first else "", str(doc.get("connector", "")) if first else "",
                          str(doc.get("task", "")) if first else "", str(doc.get("generation", "")) if first else "",
                          str(doc.get("state", "")) if first else "", str(s.get("shard", "-")),
                          str(s.get("durable_gtid") or s.get("gtid") or "-"), _lag(s.get("lag_ms")),
                          str(doc.get("events_seen", "")) if first else "")
    console.print(table)
    return ok


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    out = console or Console()
    if args.url:
        return _run_workers(args, out)
    if args.local:
        return _run_local(args, out)
    return _run_cluster(args, out)


def _run_workers(args: argparse.Namespace, out: Console) -> int:
    docs: list[tuple[str, JsonMapping | str]] = []
    for url in args.url:
        try:
            docs.append((url, fetch_worker_status(url, args.timeout)))
        except (OSError, ValueError) as exc:
            docs.append((url, str(exc)))
    if args.json:
        out.print_json(data={u: d for u, d in docs})
        return 0 if all(not isinstance(d, str) for _, d in docs) else 1
    return 0 if render_workers(docs, out) else 1


def _run_local(args: argparse.Namespace, out: Console) -> int:

    err = Console(stderr=True)
    root = state_dir(args.state_dir)
    namespace = None if args.all_namespaces else (args.namespace or "default")
    if args.name and namespace is not None:
        names = [(namespace, args.name)]
    else:
        names = [(ns, n) for ns, n in local_names(root, namespace) if not args.name or n == args.name]
    found: list[LocalConnector] = []
    try:
        for ns, name in names:
            conn = find_local(name, ns, root, timeout=args.timeout)
            if conn is not None:
                found.append(conn)
    except LocalModeError as exc:
        err.print(f"shardcdc status: {exc}", markup=False, soft_wrap=True)
        return 2
    if not found:
        what = f"{namespace}/{args.name}" if args.name and namespace else "connector"
        err.print(f"shardcdc status: no local-mode {what} under {root} (no `shardcdc run` state)", markup=False,
                  soft_wrap=True)
        return 2
    if args.json:
        out.print_json(data={"items": [c.body for c in found], "time": time.time(),
                             "local": [{"namespace": c.namespace, "name": c.name, "running": c.running,
                                        "source": c.where} for c in found]})
        return 0
    ok = True
    for conn in found:
        source = (f"local mode: `shardcdc run` at {conn.where}" if conn.running else
                  f"local mode: [red]not running[/] (status as last saved in {conn.where})")
        ok = render_connector(conn.body, out, source) and conn.running and ok
        out.print()
    return 0 if ok else 1


def _run_cluster(args: argparse.Namespace, out: Console) -> int:
    err = Console(stderr=True)
    try:
        api, default_ns = kube_api(args.kubeconfig, args.context)
    except TargetError as exc:
        err.print(f"shardcdc status: {exc}", markup=False)
        return 2
    try:
        if args.all_namespaces:
            path = "/apis/shardcdc.io/v1alpha1/cdcconnectors"
        else:
            path = CONNECTORS_PATH.format(namespace=args.namespace or default_ns)
        if args.name and not args.all_namespaces:
            one = api.request("GET", f"{path}/{args.name}", allow=(404,))
            items = [one] if one is not None else []
        else:
            items = list((api.request("GET", path) or {}).get("items") or [])
            if args.name:
                items = [i for i in items if i["metadata"]["name"] == args.name]
    except Exception as exc:  # the API client raises many types; show it, don't trace
        err.print(f"shardcdc status: cannot read CdcConnectors: {exc}", markup=False)
        return 2
    finally:
        api.api.close()
    if not items:
        err.print(f"shardcdc status: no CdcConnector {'named ' + args.name + ' ' if args.name else ''}found")
        return 2
    if args.json:
        out.print_json(data={"items": items, "time": time.time()})
        return 0
    ok = True
    for body in sorted(items, key=lambda b: (b["metadata"].get("namespace", ""), b["metadata"]["name"])):
        ok = render_connector(body, out) and ok
        out.print()
    return 0 if ok else 1
