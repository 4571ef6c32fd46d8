"""``shardcdc demo``: the whole product on one machine, through local mode.

A real Kafka broker, the VTGate test server with a 4-shard ``commerce`` keyspace and a live
workload, and a CdcConnector with 2 tasks run by ``shardcdc run``'s code (the operator's planner
and reconcile, worker processes instead of pods). A live view shows tasks, shards, positions,
lag and events per second while the demo scales the connector to 4 tasks (as ``shardcdc scale``
does), splits the keyspace into 8 shards, then stops the workload, lets every task catch up,
stops the connector and checks that the topic, materialised, equals the source table.

``--quick`` runs each step for a few seconds (tests and CI); without a terminal (or with
``--plain``) the view is printed as lines instead of redrawn. ``--real-vitess`` streams real Vitess
v24 (a ``vttestserver`` of ``make vitess``; ``--vtgate`` one already running) instead of the test
server, without the reshard step (``sources.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .sources import COLUMNS, DemoSource

if TYPE_CHECKING:
    from promlocal import Prometheus

# `shardcdc demo` is registered from devkit (pyproject's `shardcdc.commands` entry points): the demo
# starts a broker and the VTGate test server, and product code (the CLI included) never imports devkit.
HELP = "Run the demo: local Kafka, the VTGate test server and a connector"
NAME = "demo"
KEYSPACE = "commerce"
TABLE = "items"
SHARDS = ["-40", "40-80", "80-c0", "c0-"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--quick", action="store_true", help="short steps (about a minute in all)")
    parser.add_argument("--duration", type=float, default=None,
                        help="seconds of workload per step (default 10, --quick 2)")
    parser.add_argument("--rate", type=float, default=None, help="workload transactions per second (default 100)")
    parser.add_argument("--tasks", type=int, default=2, help="tasks at the start")
    parser.add_argument("--scale-to", type=int, default=4, help="tasks after the scale step")
    parser.add_argument("--split-to", type=int, default=8, help="shards after the reshard step")
    parser.add_argument("--bootstrap", default=None, help="use this Kafka cluster instead of starting a broker")
    parser.add_argument("--prefix", default=NAME, help="topic prefix (and offsets topic prefix)")
    parser.add_argument("--state-dir", type=Path, default=None, help="local-mode state (default: a temporary one)")
    parser.add_argument("--plain", action="store_true", help="print lines instead of a live view")
    parser.add_argument("--prometheus", action="store_true",
                        help="also start Prometheus (make prometheus installs it) scraping the connector, with "
                             "the shipped alert rules, and print its URL")
    parser.add_argument("--prometheus-port", type=int, default=0, metavar="PORT",
                        help="Prometheus's port on 127.0.0.1 with --prometheus (default: a free one)")
    parser.add_argument("--step-timeout", type=float, default=180.0, help="give up when a step takes longer")
    parser.add_argument("--real-vitess", action="store_true",
                        help="stream real Vitess v24 (a vttestserver; `make vitess` builds it) instead of the test "
                             "server: no reshard step (a single-process cluster cannot reshard)")
    parser.add_argument("--vtgate", default=None, metavar="HOST:PORT",
                        help="real Vitess already running: this VTGate, whose keyspace commerce has --table in its "
                             "VSchema (implies --real-vitess)")
    parser.add_argument("--table", default=TABLE, help="the table the workload writes (default items)")
    return run


def manifest(vtgate: str, bootstrap: str, prefix: str, tasks: int) -> dict[str, Any]:
    """The CdcConnector the demo runs: what you would ``kubectl apply`` or ``shardcdc run -f``."""
    return {
        "apiVersion": "shardcdc.io/v1alpha1",
        "kind": "CdcConnector",
        "metadata": {"name": NAME},
        "spec": {
            "source": {"vitess": {"vtgate": vtgate, "keyspace": KEYSPACE}},
            "kafka": {"bootstrapServers": bootstrap, "topicPrefix": prefix, "offsetsTopic": f"{prefix}-offsets"},
            "tasks": tasks,
            "config": {
                "offset.storage.replication.factor": "1",
                "offset.flush.interval.ms": "200",
                "topic.creation.default.partitions": "4",
            },
        },
    }


class DemoError(RuntimeError):
    pass


class Observer:
    """Polls the running connector (control endpoint) and its workers' ``/status`` documents."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.body: dict[str, Any] = {}
        self.docs: dict[str, dict[str, Any]] = {}
        self.rates: dict[str, float] = {}
        self._last: dict[str, tuple[float, int]] = {}

    def poll(self) -> None:
        self.body = self.client.get()
        docs: dict[str, dict[str, Any]] = {}
        for pod in self.client.pods():
            name = pod["metadata"]["name"]
            ports = pod["spec"]["containers"][0].get("ports") or []
            if pod["status"].get("phase") != "Running" or not ports:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]['containerPort']}/status",
                                            timeout=1) as resp:
                    docs[name] = json.load(resp)
            except (OSError, ValueError, http.client.HTTPException):  # a worker stopping mid-answer
                continue
        now = time.monotonic()
        for name, doc in docs.items():
            sent = int(doc.get("records_sent") or 0)
            t0, s0 = self._last.get(name, (now, sent))
            if now - t0 >= 0.5:
                self.rates[name] = (sent - s0) / (now - t0)
                self._last[name] = (now, sent)
            elif name not in self._last:
                self._last[name] = (now, sent)
        self.docs = docs

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}

    def condition(self, type_: str) -> str:
        return next((c["status"] for c in self.status.get("conditions") or () if c["type"] == type_), "Unknown")

    def assignment(self) -> Mapping[str, Any]:
        return self.status.get("assignment") or {}

    def positions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for task in self.assignment().get("taskStates") or ():
            for part in (task.get("position") or "").split(";"):
                if "@" in part:
                    shard, gtid = part.split("@", 1)
                    out[shard] = gtid
        return out


def _short_gtid(gtid: str) -> str:
    return "…" + gtid.rsplit(":", 1)[-1] if ":" in gtid else gtid


def render(obs: Observer, step: str, events: deque[str], workload: Any) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    a = obs.assignment()
    head = Text.assemble(
        ("shardcdc demo", "bold"), f"  connector {NAME}  keyspace {KEYSPACE}  ",
        ("Ready=" + obs.condition("Ready"), "green" if obs.condition("Ready") == "True" else "yellow"),
        f"  generation {a.get('generation', '-')}  tasks {a.get('tasks', '-')} (previous {a.get('previousTasks', '-')})"
        f"  shards {len(a.get('shards') or ())}  phase {a.get('phase', '-')}",
    )
    table = Table(expand=False)
    for col in ("task", "pod", "phase", "shards @ position", "lag", "events/s"):
        table.add_column(col)
    for task in a.get("taskStates") or ():
        positions = dict(p.split("@", 1) for p in (task.get("position") or "").split(";") if "@" in p)
        shards = "\n".join(f"{s} @ {_short_gtid(positions[s]) if s in positions else '-'}" for s in task["shards"])
        pod = task.get("pod") or "-"
        table.add_row(str(task["id"]), pod, task.get("phase", "-"), shards, task.get("lag", "-"),
                      f"{obs.rates.get(pod, 0.0):,.0f}")
    stats = workload.stats
    foot = Text(f"workload: {stats.transactions} transactions, {stats.rows} rows    step: {step}")
    return Group(head, table, Text("events:", style="bold"), *(Text(e) for e in events), foot)


def run(args: argparse.Namespace) -> int:
    # The VTGate test server runs in this process and the workers are forked from it: gRPC's fork
    # handlers would log a line per fork.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from rich.console import Console
    from rich.live import Live

    from cdcoperator.local.control import ControlClient
    from cdcoperator.local.runner import LocalRunner, RunnerThread
    from localkafka import KafkaBroker, consume_all
    from shardcdc_cli.materialise import compare, materialise
    from vtgatesim.workload import Workload

    from .sources import SourceError, real_source, require_vitess, sim_source

    duration = args.duration if args.duration is not None else (2.0 if args.quick else 10.0)
    rate = args.rate if args.rate is not None else (60.0 if args.quick else 100.0)
    console = Console()
    plain = args.plain or not console.is_terminal
    events: deque[str] = deque(maxlen=8)
    step = "starting"
    t0 = time.monotonic()

    def say(text: str) -> None:
        if plain:
            # soft_wrap: lines stay whole in logs (rich wraps at 80 columns without a terminal).
            console.print(f"[{time.monotonic() - t0:6.1f}s] {text}", highlight=False, soft_wrap=True, markup=False)

    def on_event(event: Mapping[str, Any]) -> None:
        line = f"{event['type']:<7} {event['reason']:<17} {event['message']}"
        events.append(line)
        say(line)

    real = args.real_vitess or args.vtgate is not None
    if real and not args.vtgate:
        try:
            require_vitess()  # before anything starts: one line saying to run `make vitess`
        except SourceError as exc:
            console.print(f"demo failed: {exc}", markup=False, highlight=False, soft_wrap=True)
            return 1
    with contextlib.ExitStack() as stack:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            say("starting a Kafka broker")
            bootstrap = stack.enter_context(KafkaBroker()).bootstrap
        if real and not args.vtgate:
            say(f"starting real Vitess (vttestserver, {len(SHARDS)} shards, about a minute)")
        try:
            source = stack.enter_context(real_source(KEYSPACE, args.table, len(SHARDS), args.vtgate) if real
                                         else sim_source(KEYSPACE, args.table, SHARDS))
        except SourceError as exc:
            console.print(f"demo failed: {exc}", markup=False, highlight=False, soft_wrap=True)
            return 1
        shards = source.shards
        topic = f"{args.prefix}.{KEYSPACE}.{args.table}"
        workload = Workload(source.target, KEYSPACE, table=args.table, seed=42, large_every=250, large_rows=500)
        workload.run(transactions=100)  # history for the initial snapshot (VStream copy)
        state_dir = args.state_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shardcdc-demo-")))
        body = manifest(source.vtgate, bootstrap, args.prefix, args.tasks)
        (state_dir / "connector.yaml").write_text(json.dumps(body, indent=2) + "\n")
        say(f"Kafka {bootstrap}, {source.label} {source.vtgate}, keyspace {KEYSPACE} ({len(shards)} shards); "
            f"connector manifest {state_dir / 'connector.yaml'}")
        runner = LocalRunner(body, state_dir, resync=1.0, restart_backoff=2.0, on_event=on_event,
                             metrics_port=0 if args.prometheus else None)
        runner_thread = RunnerThread(runner).start()
        stack.callback(runner_thread.stop)
        prom = None
        if args.prometheus:
            try:
                prom = stack.enter_context(_prometheus(runner.targets_dir, state_dir, args.prometheus_port, console))
            except DemoError as exc:
                console.print(f"[bold red]demo failed:[/] {exc}")
                return 1
        client = ControlClient.find(NAME, state_dir=state_dir)
        obs = Observer(client)
        writer = threading.Thread(target=workload.run, kwargs={"rate": rate}, name="workload", daemon=True)
        writer.start()
        stack.callback(writer.join, 60)
        stack.callback(workload.stop)

        live = None if plain else stack.enter_context(
            Live(render(obs, step, events, workload), console=console, refresh_per_second=4))

        def refresh() -> None:
            obs.poll()
            if live is not None:
                live.update(render(obs, step, events, workload))

        def wait(what: str, done: Callable[[], bool]) -> None:
            deadline = time.monotonic() + args.step_timeout
            while True:
                refresh()
                if done():
                    return
                if time.monotonic() > deadline:
                    raise DemoError(f"timed out after {args.step_timeout:.0f}s waiting for {what}")
                time.sleep(0.5)  # the view's refresh period

        def ready(generation: int, tasks: int, shards: int) -> Callable[[], bool]:
            def check() -> bool:
                a = obs.assignment()
                return (obs.condition("Ready") == "True" and a.get("generation") == generation
                        and a.get("tasks") == tasks and len(a.get("shards") or ()) == shards)
            return check

        def hold() -> None:
            end = time.monotonic() + duration
            wait(f"{duration:.0f}s of workload", lambda: time.monotonic() >= end)
            say(table_text(obs))

        steps = 4 if source.reshard is not None else 3  # a vttestserver cannot reshard
        try:
            tasks0 = min(args.tasks, len(shards))
            step = f"1/{steps} start: {tasks0} tasks over {len(shards)} shards"
            say(step)
            wait("generation 0 to stream", ready(0, tasks0, len(shards)))
            hold()
            tasks1 = min(args.scale_to, len(shards))
            step = f"2/{steps} scale: shardcdc scale {NAME} --tasks {args.scale_to}"
            say(step)
            client.scale(args.scale_to)
            wait("generation 1 to stream", ready(1, tasks1, len(shards)))
            hold()
            if source.reshard is not None:
                step = f"3/{steps} reshard: split {KEYSPACE} into {args.split_to} shards"
                say(step)
                source.reshard(args.split_to)
                wait("generation 2 to stream the new shards",
                     ready(2, min(args.scale_to, args.split_to), args.split_to))
                hold()
            step = f"{steps}/{steps} stop the workload and let every task catch up"
            say(step)
            workload.stop()
            writer.join(60)
            wait("every task to catch up with the source", caught_up(source, obs, bootstrap, topic))
            say(table_text(obs))
            if prom is not None:  # its graphs show this run: the running workers scraped before they stop
                wait("Prometheus to scrape the workers' records", lambda: _records_sent(prom) > 0)
                say(f"Prometheus: {_records_sent(prom):,.0f} records sent, scraped from the running workers")
        except DemoError as exc:
            console.print(f"[bold red]demo failed:[/] {exc}")
            console.print(f"worker logs: {runner.dir / 'pods'}")
            return 1
        finally:
            if live is not None:
                live.stop()
        step = "stopping the connector"
        say("stopping the connector (every worker flushes and commits its offsets)")
        runner_thread.stop()
        records = consume_all(bootstrap, topic)
        state = materialise(records)
        diff = compare(state, source.truth(), "id", list(COLUMNS))
        console.print(
            f"consumed {len(records)} records from {topic}; materialised {len(state.rows)} "
            f"rows; {state.duplicates} duplicate deliveries; workload: {workload.stats.transactions} transactions",
            soft_wrap=True,
        )
        if diff.empty:
            console.print("[bold green]verified: the topic equals the source table[/]")
            return 0
        console.print(f"[bold red]mismatch[/]\n{diff.summary()}")
        return 1


def caught_up(source: DemoSource, obs: Observer, bootstrap: str, topic: str) -> Callable[[], bool]:
    """After the workload stopped: every task at the test server's final positions; on real Vitess
    (whose positions the demo does not read) the topic, materialised, equal to the source table."""
    if source.positions is not None:
        final = source.positions()
        return lambda: obs.positions() == final
    from localkafka import consume_all
    from shardcdc_cli.materialise import compare, materialise

    truth = source.truth()
    return lambda: compare(materialise(consume_all(bootstrap, topic)), truth, "id", list(COLUMNS)).empty


@contextlib.contextmanager
def _prometheus(targets_dir: Path, state_dir: Path, port: int, console: Any) -> Iterator[Prometheus]:
    """Prometheus beside the demo, over local mode's target files; stopped with the demo."""
    from promlocal import PrometheusError, for_local_mode

    prom = for_local_mode(targets_dir, state_dir / "prometheus-server", interval="5s", port=port)
    try:
        prom.start()
    except (FileNotFoundError, PrometheusError) as exc:
        raise DemoError(f"--prometheus: {exc}") from exc
    console.print(f"Prometheus: {prom.url} (scraping the workers and the operator every 5s, shardcdc alert rules "
                  f"loaded; try {prom.url}/graph?g0.expr=shardcdc_milliseconds_behind_source and {prom.url}/alerts)",
                  soft_wrap=True, markup=False, highlight=False)
    try:
        yield prom
    finally:
        prom.stop()


def _records_sent(prom: Prometheus) -> float:
    from promlocal import PrometheusError

    try:
        result = prom.query('sum(shardcdc_records_sent_total{job="shardcdc-workers"})')
    except (OSError, PrometheusError):
        return 0.0  # asked again at the next refresh
    return float(result[0]["value"][1]) if result else 0.0


def table_text(obs: Observer) -> str:
    """The view as plain lines (for logs and non-terminal output)."""
    a = obs.assignment()
    lines = [f"generation {a.get('generation')} ({a.get('phase')}): {a.get('tasks')} tasks, previous "
             f"{a.get('previousTasks')}, Ready={obs.condition('Ready')}, lag {obs.status.get('lag', '-')}"]
    for task in a.get("taskStates") or ():
        pod = task.get("pod") or "-"
        positions = dict(p.split("@", 1) for p in (task.get("position") or "").split(";") if "@" in p)
        shards = ", ".join(f"{s}@{_short_gtid(positions[s]) if s in positions else '-'}" for s in task["shards"])
        lines.append(f"  task {task['id']} {pod:<14} {task.get('phase', '-'):<10} lag {task.get('lag', '-'):<4} "
                     f"{obs.rates.get(pod, 0.0):7,.0f} ev/s  {shards}")
    return "\n".join(lines)
