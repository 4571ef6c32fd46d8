"""``shardcdc run -f connector.yaml``: run a CdcConnector on this machine (local mode).

The manifest is the one ``kubectl apply -f`` takes. Events print as they happen and a
``kubectl get cdc``-like line whenever the summary changes; Ctrl-C (or SIGTERM) stops every worker
gracefully. Editing the file while running re-applies it (as ``kubectl apply`` would); ``shardcdc
scale <name> --tasks N`` changes the task count of the running instance.

The file is the source of truth, as for ``kubectl apply``: a restarted ``shardcdc run`` continues
the saved generation and status, but applies the file's spec, so a scale meant to last belongs in
the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from cdcoperator.connectorcheck import connector_documents, connector_label, validate_connector
from cdcoperator.local.control import default_state_dir
from cdcoperator.local.ports import port_range
from cdcoperator.local.runner import LocalRunner
from cdcoperator.manifest import ManifestError, load_documents
from cdcoperator.model import KIND, SpecError
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["load_manifest", "register", "summary_line"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("-f", "--filename", required=True, metavar="FILE", type=Path,
                        help="CdcConnector manifest (YAML or JSON, as for kubectl apply -f)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where status, worker configs and logs live (default: $SHARDCDC_OPERATOR_STATE_DIR "
                             "or ~/.local/state/shardcdc)")
    parser.add_argument("--secrets-dir", type=Path, default=None,
                        help="Secrets referenced by the manifest, as <dir>/<secret name>/<key> files")
    parser.add_argument("--resync-seconds", type=float, default=2.0, help="interval of the level-based resync")
    parser.add_argument("--restart-backoff", type=float, default=10.0,
                        help="first delay before a failed worker restarts (doubles up to 300 s)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve the operator's metrics on 127.0.0.1:PORT (0: any free port) and write "
                             "Prometheus target files (see deploy/prometheus/scrape-configs.yaml)")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return run


def load_manifest(path: Path) -> JsonObject:
    """The one CdcConnector document in a YAML/JSON file, valid as ``shardcdc validate`` judges it
    (the same checks: what one refuses, the other does not start). ``SpecError``: one line per
    problem."""

    try:
        connectors = connector_documents(load_documents(path))
    except ManifestError as exc:
        raise SpecError(str(exc)) from None
    if len(connectors) != 1:
        raise SpecError(f"{path}: expected exactly one {KIND} document, found {len(connectors)}")
    index, body = connectors[0]
    problems = validate_connector(body)
    if problems:
        raise SpecError(f"{path} {KIND}/{connector_label(body, index)} is invalid (`shardcdc validate -f {path}` "
                        f"says the same); nothing was started:\n" + "\n".join(f"  - {p}" for p in problems))
    return dict(body)


def summary_line(body: JsonMapping) -> str:
    """NAME READY STATE SHARDS TASKS GENERATION LAG, like ``kubectl get cdc``."""
    status = body.get("status") or {}
    ready = next((c["status"] for c in status.get("conditions") or () if c.get("type") == "Ready"), "Unknown")
    a = status.get("assignment") or {}
    line = (f"{body['metadata']['name']}  ready={ready}  state={(body.get('spec') or {}).get('state', 'running')}  "
            f"shards={(status.get('shards') or {}).get('servingCount', '-')}  tasks={a.get('tasks', '-')}  "
            f"generation={a.get('generation', '-')}  phase={a.get('phase', '-')}  lag={status.get('lag', '-')}")
    return line + "".join(f"\n  {backfill_line(e)}" for e in status.get("backfills") or ())


def backfill_line(entry: JsonMapping) -> str:
    """One backfill: ``backfill b1  Running  3/8 chunks  12,000 rows``, with the message when not running."""
    done, total = entry.get("chunksDone"), entry.get("chunksTotal")
    chunks = f"  {done}/{total} chunks" if total is not None else ""
    rows = f"  {int(entry['rows']):,} rows" if entry.get("rows") is not None else ""
    note = f"  ({entry['message']})" if entry.get("message") and entry.get("phase") != "Running" else ""
    return f"backfill {entry.get('id')}  {entry.get('phase')}{chunks}{rows}{note}"


def run(args: argparse.Namespace) -> int:

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    path: Path = args.filename
    try:
        port_range()  # a bad SHARDCDC_PORT_RANGE is refused now, not when the first child needs a port
        body = load_manifest(path)
    except (OSError, SpecError, ValueError) as exc:
        print(f"shardcdc run: {exc}", file=sys.stderr)
        return 2

    def on_event(event: JsonMapping) -> None:
        print(f"{event['time']}  {event['type']:<7} {event['reason']:<18} {event['message']}", flush=True)

    state_dir = args.state_dir or default_state_dir()
    try:
        runner = LocalRunner(body, state_dir, secrets_dir=args.secrets_dir, resync=args.resync_seconds,
                             restart_backoff=args.restart_backoff, on_event=on_event, metrics_port=args.metrics_port)
    except SpecError as exc:
        print(f"shardcdc run: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the metrics port is taken
        print(f"shardcdc run: --metrics-port {args.metrics_port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"cdcconnector {runner.namespace}/{runner.name}: local mode, state in {runner.dir}", flush=True)
    if runner.metrics is not None:
        print(f"operator metrics: http://{runner.metrics.address}/metrics; Prometheus targets (file_sd): "
              f"{runner.targets_dir}/*.json", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        watcher = asyncio.ensure_future(_watch(runner, path, stop))
        try:
            await runner.run(stop)
        finally:
            watcher.cancel()

    asyncio.run(main())
    print("stopped: every worker has exited", flush=True)
    return 0


async def _watch(runner: LocalRunner, path: Path, stop: asyncio.Event) -> None:
    """Print the summary when it changes; re-apply the manifest when the file changes."""

    last_line = ""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = 0
    while not stop.is_set():
        body = runner.cluster.connector(runner.namespace, runner.name)
        line = summary_line(body) if body else ""
        if line != last_line:
            print(line, flush=True)
            last_line = line
        try:
            now = path.stat().st_mtime_ns
        except OSError:
            now = mtime
        if now != mtime:
            mtime = now
            try:
                new = load_manifest(path)
                meta = new.get("metadata") or {}
                if (meta.get("name"), meta.get("namespace") or "default") != (runner.name, runner.namespace):
                    raise SpecError("the file now names another connector; start another `shardcdc run` for it")
                runner.cluster.put_connector(new)
                print(f"re-applied {path}", flush=True)
                runner.wake()
            except Exception as exc:  # a half-written or invalid file: keep running the last good spec
                print(f"not re-applied: {exc}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
