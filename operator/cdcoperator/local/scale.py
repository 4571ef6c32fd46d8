"""``shardcdc scale <name> --tasks N``: change the task count of a connector running in local mode.

Like ``kubectl scale cdc/<name> --replicas=N``: the instance started by ``shardcdc run`` gets the
new ``spec.tasks`` through its control endpoint and starts the next generation (after draining
the current one) on its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from cdcoperator.local.control import ControlClient, ControlError

__all__ = ["register"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("name", help="the connector's metadata.name")
    count = parser.add_mutually_exclusive_group(required=True)
    count.add_argument("--tasks", type=int, help="the new spec.tasks")
    count.add_argument("--replicas", type=int, dest="tasks", help="the same as --tasks (kubectl's name)")
    parser.add_argument("-n", "--namespace", default="default", help="the connector's namespace (default: default)")
    parser.add_argument("--state-dir", type=Path, default=None, help="the state directory given to `shardcdc run`")
    return run


def run(args: argparse.Namespace) -> int:

    try:
        body = ControlClient.find(args.name, args.namespace, args.state_dir).scale(args.tasks)
    except ControlError as exc:
        print(f"shardcdc scale: {exc}", file=sys.stderr)
        return 1
    print(f"cdcconnector.shardcdc.io/{args.name} scaled (spec.tasks={body['spec']['tasks']}, "
          f"metadata.generation={body['metadata']['generation']})")
    return 0
