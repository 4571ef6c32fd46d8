"""``shardcdc offsets list|reset|set|handback``: read and change a connector's offsets (Kafka Connect format).

``handback`` prepares the offsets for Debezium's Vitess connector to resume at shardcdc's positions
(``cdcworker.offsets.handback``): it writes new records only (fresh generations, or the plain server
key with ``--no-per-task``) and prints the Debezium settings to use.

Changing offsets under a running worker is useless at best (the worker overwrites them with its
next flush) and harmful at worst, so ``reset`` and ``set`` refuse unless the connector is stopped:
``spec.state: stopped`` and every worker exited (``status.assignment.phase: Stopped``). In a
cluster the CdcConnector's status says so. Without one (``--local``, ``-f``) the local-mode
instance is asked (``shardcdc_cli.localmode``): a running ``shardcdc run`` by the same rule on
its live status, and no running instance means no worker (they die with it); a connector that
``shardcdc run`` never ran under the state directory cannot be shown stopped and is refused.
``--force-offline`` skips the check (the user's then, and a warning says so). Every change is
printed first and needs a yes (``--yes`` for scripts).

Exit codes: 0 done (or nothing to do, or declined), 1 error, 3 refused because the connector runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from cdcoperator.local.cluster import clear_saved_generation_record
from cdcoperator.local.control import ControlClient, ControlError
from cdcoperator.offsets import LOCAL_STOP, OFFSETS_ANNOTATION, RESET_NOTE, RESET_STATUS, stopped_problem
from cdcoperator.planner import recorded_generation
from cdcworker import kafkaclients
from cdcworker.offsets.edits import (
    Change,
    OffsetsError,
    apply_changes,
    connect_document,
    entries,
    plan_alter,
    plan_handback,
    plan_reset,
    plan_set_shards,
)
from cdcworker.offsets.store import OffsetStore, OffsetStoreError
from shardcdc_cli.localmode import LocalModeError, find_local, state_dir
from shardcdc_cli.target import (
    CONNECTORS_PATH,
    Target,
    TargetError,
    add_kafka_arguments,
    add_kube_arguments,
    kube_api,
    resolve,
)

if TYPE_CHECKING:
    from cdcworker.offsets.handback import HandBack, ShardcdcGeneration
    from cdcworker.offsets.store import OffsetStore

__all__ = ["EXIT_REFUSED", "register"]

EXIT_REFUSED = 3


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("list", "show the connector's offsets"),
                         ("reset", "delete every offset of a stopped connector (next start: snapshot.mode)"),
                         ("set", "change offsets of a stopped connector (--shard or an offsets document)"),
                         ("handback", "prepare a stopped connector's offsets for Debezium's Vitess connector "
                                      "and print the Debezium settings")):
        sub = actions.add_parser(action, help=text, description=text)
        sub.add_argument("name", nargs="?", help="the connector (CdcConnector name / worker 'name')")
        add_kube_arguments(sub)
        add_kafka_arguments(sub)
        sub.add_argument("--local", action="store_true",
                         help="no cluster: the connector runs locally (shardcdc run) or not at all")
        if action == "list":
            sub.add_argument("--json", action="store_true", help="print Kafka Connect's offsets document")
        else:
            sub.add_argument("--force-offline", action="store_true",
                             help="skip the stopped check (you make sure no worker of the connector runs)")
            sub.add_argument("--state-dir", type=Path, default=None,
                             help="with --local/-f: the state directory given to `shardcdc run`")
            sub.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
        if action == "set":
            sub.add_argument("--shard", action="append", default=[], metavar="SHARD=GTID",
                             help="new position of one shard (repeatable), e.g. --shard=-80=MySQL56/<uuid>:1-42 (with '=': shard names start with '-')")
            sub.add_argument("--offsets-file", metavar="FILE",
                             help="a Kafka Connect offsets document ({\"offsets\": [...]}, as list --json prints)")
        if action == "handback":
            sub.add_argument("--tasks-max", type=int, default=None, metavar="N",
                             help="Debezium's tasks.max (default: shardcdc's task count)")
            sub.add_argument("--no-per-task", action="store_true",
                             help="Debezium without per-task offsets (vitess.offset.storage.per.task=false, one task)")
            sub.add_argument("--topic-prefix", help="topic.prefix (default: the connector's)")
    return run


def _table(items: Sequence[Any], console: Console, title: str) -> None:  # Any: offset records and rows of the offsets tools (cdcworker.offsets.edits), several record types
    table = Table(title=title, title_justify="left")
    for col in ("server", "task key", "gen", "shard", "gtid", "copy"):
        table.add_column(col)
    for e in items:
        tk = e.task_key
        positions = e.positions() or [None]
        for sg in positions:
            table.add_row(e.partition.server, e.partition.task_key or "-", str(tk.gen) if tk else "-",
                          sg.shard if sg else "?", (sg.gtid or "(copy)") if sg else e.value.decode(errors="replace"),
                          f"{len(sg.table_p_ks)} tables" if sg and sg.table_p_ks else "")
    console.print(table)


def _confirm(changes: Sequence[Change], args: argparse.Namespace, console: Console) -> bool:
    for ch in changes:
        console.print(f"  {ch.describe()}", highlight=False, markup=False, soft_wrap=True)
    if args.yes:
        return True
    if not sys.stdin.isatty():
        console.print("not a terminal: nothing changed (give --yes to apply without asking)")
        return False
    from rich.prompt import Confirm

    if Confirm.ask(f"write these {len(changes)} records?", default=False, console=console):
        return True
    console.print("declined: nothing changed")
    return False


def _recorded(args: argparse.Namespace, target: Target) -> ShardcdcGeneration | None:
    """shardcdc's last generation from the connector's status (cluster or local mode), if any."""

    body = target.body
    if target.source != "cluster":
        try:
            conn = find_local(target.name, args.namespace or target.namespace or "default", state_dir(args.state_dir))
        except LocalModeError as exc:
            raise OffsetsError(str(exc)) from None
        body = conn.body if conn is not None else None
    return recorded_generation(body)


def _plan_handback(args: argparse.Namespace, target: Target, records: Any) -> tuple[list[Change], HandBack]:  # Any: offset records and rows of the offsets tools (cdcworker.offsets.edits), several record types
    server = args.topic_prefix or target.topic_prefix
    if not server:
        raise OffsetsError("the connector's topic.prefix is unknown: give --topic-prefix")
    recorded = _recorded(args, target)
    if args.no_per_task and args.tasks_max not in (None, 1):
        raise OffsetsError("--no-per-task: Debezium without per-task offsets runs one task; drop --tasks-max")
    tasks_max = 1 if args.no_per_task else args.tasks_max or (recorded.task_count if recorded else None)
    if tasks_max is None:
        raise OffsetsError("shardcdc's task count is unknown (no status): give --tasks-max N")
    return plan_handback(records, target.name, server, recorded, per_task=not args.no_per_task, tasks_max=tasks_max)


def handback_settings(target: Target, server: str, handback: HandBack) -> list[str]:
    """The lines that tell the user how to configure Debezium after a hand-back."""
    lines = ["Debezium Vitess connector settings (the rest of its configuration unchanged):",
             f"  name={target.name}", f"  topic.prefix={server}"]
    lines += [f"  {k}={v}" for k, v in handback.settings]
    lines += [f"  remove {k}" for k in handback.remove]
    lines.append(f"Kafka Connect worker: offset.storage.topic={target.offsets_topic} (distributed mode)")
    return lines


def _confirm_and_apply(store: OffsetStore, changes: Sequence[Change], args: argparse.Namespace, out: Console,
                       name: str) -> bool:
    out.print(f"{args.action}: {len(changes)} records of {name} in topic {store.topic}:")
    if not _confirm(changes, args, out):
        return False
    apply_changes(store, changes, timeout=args.timeout)
    out.print(f"wrote {len(changes)} records")
    return True


def _handback(args: argparse.Namespace, target: Target, store: OffsetStore, records: object, out: Console) -> int:
    changes, handback = _plan_handback(args, target, records)
    if not changes:
        out.print(f"the offsets of {target.name} in {target.offsets_topic} are handed back already")
    elif not _confirm_and_apply(store, changes, args, out, target.name):
        return 0
    for line in handback_settings(target, args.topic_prefix or target.topic_prefix or "", handback):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    return 0


def _plan(args: argparse.Namespace, records: Any, name: str) -> list[Change]:  # Any: offset records and rows of the offsets tools (cdcworker.offsets.edits), several record types
    if args.action == "reset":
        return plan_reset(records, name)
    if bool(args.shard) == bool(args.offsets_file):
        raise OffsetsError("give --shard SHARD=GTID (repeatable) or --offsets-file FILE")
    if args.offsets_file:
        return plan_alter(records, name, json.loads(Path(args.offsets_file).read_text()))
    positions: dict[str, str] = {}
    for item in args.shard:
        shard, sep, gtid = item.partition("=")
        if not sep or not shard:
            raise OffsetsError(f"--shard {item!r}: expected SHARD=GTID")
        positions[shard] = gtid
    return plan_set_shards(records, name, positions)


def _local_problem(args: argparse.Namespace, target: Target, err: Console) -> tuple[str, str | None]:
    """The connector's namespace/name and why it is not stopped, asked of its ``shardcdc run`` instance."""

    root = state_dir(args.state_dir)
    namespace = args.namespace or target.namespace or "default"
    where = f"{namespace}/{target.name}"
    try:
        conn = find_local(target.name, namespace, root)
    except LocalModeError as exc:
        return where, str(exc)
    if conn is None:
        return where, (f"no `shardcdc run` state of it under {root}, so nothing shows it is stopped; give the "
                       "--state-dir of its `shardcdc run`, or --force-offline if no worker of it runs anywhere")
    if conn.running:
        return where, stopped_problem(conn.body, LOCAL_STOP)
    err.print(f"`shardcdc run` for {where} is not running (state in {conn.where}): no worker of it runs",
              markup=False, soft_wrap=True)
    return where, None


def _clear_local_generation(args: argparse.Namespace, target: Target, out: Console, err: Console) -> int:
    """``_clear_generation`` for a local-mode connector: through its running ``shardcdc run``
    (control endpoint), else in the state it saved; nothing when it has no local state."""

    root = state_dir(args.state_dir)
    namespace = args.namespace or target.namespace or "default"
    try:
        conn = find_local(target.name, namespace, root)
        if conn is None or not ((conn.body or {}).get("status") or {}).get("assignment"):
            return 0
        if conn.running:
            ControlClient.find(target.name, namespace, root).patch_status(RESET_STATUS)
        else:
            clear_saved_generation_record(root, namespace, target.name)
    except (LocalModeError, ControlError, OSError, ValueError) as exc:
        err.print(f"shardcdc offsets: the offsets are reset, but the generation record of {namespace}/{target.name} "
                  f"under {root} could not be cleared ({exc}); its workers would fail to start. Run `shardcdc offsets "
                  "reset` again once its `shardcdc run` answers (or is stopped)", markup=False, soft_wrap=True)
        return 1
    out.print(RESET_NOTE)
    return 0


def _clear_generation(args: argparse.Namespace, target: Target, out: Console, err: Console) -> int:
    """After a reset, clear the connector's generation record as the operator's
    ``shardcdc.io/offsets=reset`` does (``cdcoperator.offsets.RESET_STATUS``): its workers would
    otherwise look for the deleted keys of the previous generation and fail."""
    if target.source != "cluster":
        return _clear_local_generation(args, target, out, err)
    if not ((target.body or {}).get("status") or {}).get("assignment"):
        return 0

    try:
        api, _ = kube_api(args.kubeconfig, args.context)
        try:
            api.request("PATCH", CONNECTORS_PATH.format(namespace=target.namespace) + f"/{target.name}/status",
                      {"status": RESET_STATUS}, content_type="application/merge-patch+json")
        finally:
            api.api.close()
    except Exception as exc:  # RBAC (patch cdcconnectors/status), the API server
        err.print(f"shardcdc offsets: the offsets are reset, but the generation record of {target.namespace}/"
                  f"{target.name} could not be cleared ({exc}); its workers would fail to start. Run "
                  f"`kubectl annotate cdc/{target.name} -n {target.namespace} {OFFSETS_ANNOTATION}=reset`, "
                  "which clears it through the operator", markup=False, soft_wrap=True)
        return 1
    out.print(RESET_NOTE)
    return 0


def _require_topic(target: Target, timeout: float) -> None:
    """Fail unless the offsets topic exists (a metadata request naming it could auto-create it)."""

    topics = kafkaclients.admin(target.client_config, "offsets admin client").list_topics(timeout=timeout).topics
    if target.offsets_topic not in topics:
        raise OffsetStoreError(f"offsets topic {target.offsets_topic!r} not found")


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    from confluent_kafka import KafkaException

    out = console or Console()
    err = Console(stderr=True)
    try:
        target: Target = resolve(args, args.name, local=args.local)
    except (TargetError, OSError) as exc:
        err.print(f"shardcdc offsets: {exc}", markup=False)
        return 1
    if args.action != "list":
        if args.force_offline:
            err.print(f"[yellow]warning[/]: --force-offline: not checking that connector {target.name!r} is stopped; "
                      "if a worker of it runs, it overwrites these offsets (or resumes from the wrong place)")
        else:
            if target.source == "cluster":
                where, problem = f"{target.namespace}/{target.name}", stopped_problem(target.body)
            else:
                where, problem = _local_problem(args, target, err)
            if problem is not None:
                err.print(f"refusing to change the offsets of {where}: {problem}", markup=False, soft_wrap=True)
                return EXIT_REFUSED
    try:
        _require_topic(target, args.timeout)
        with OffsetStore(target.client_config, target.offsets_topic, timeout=args.timeout) as store:
            records = store.load()
            if args.action == "list":
                mine = entries(records, target.name)
                if args.json:
                    out.print_json(data=connect_document(mine))
                elif mine:
                    _table(mine, out, f"offsets of {target.name} in {target.offsets_topic}")
                else:
                    out.print(f"no offsets of {target.name} in {target.offsets_topic}")
                return 0
            if args.action == "handback":
                return _handback(args, target, store, records, out)
            changes = _plan(args, records, target.name)
            if not changes:
                out.print(f"nothing to change for {target.name} in {target.offsets_topic}")
                return 0
            if not _confirm_and_apply(store, changes, args, out, target.name):
                return 0
            if args.action == "reset":
                return _clear_generation(args, target, out, err)
            return 0
    except (OffsetsError, OffsetStoreError, KafkaException, OSError, ValueError) as exc:
        err.print(f"shardcdc offsets: {exc}", markup=False)
        return 1
