"""The ``shardcdc`` command: one entry point, subcommands registered per concern.

Each subcommand lives next to the code it drives; this module only maps names to
``(module, function)`` pairs and imports the module when the subcommand runs, so
``shardcdc --help`` stays fast and the worker image needs no Spark or Kubernetes code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# name -> (module, "register" function that adds the subparser's arguments and sets `func`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("cdcworker.demo", "Run the demo: local Kafka, the VTGate test server and a connector"),
    "worker": ("cdcworker.run", "Run one connector task: stream its shards into Kafka"),
    "vtgate-sim": ("vtgatesim.cli", "Serve the VTGate test server (vtgate and vtctld gRPC services)"),
    "operator": ("cdcoperator.cli", "Run the CdcConnector operator (kopf): per-task workers, generations, resharding"),
    "backfill": ("cdcworker.backfill.cli", "Run a snapshot backfill (Spark or local) with a live progress view"),
    "run": ("cdcoperator.local.run", "Run a CdcConnector on this machine (local mode: worker processes, no Kubernetes)"),
    "scale": ("cdcoperator.local.scale", "Change the task count of a connector running in local mode"),
    "status": ("cdcworker.admin.status", "Show a connector: generation, tasks, shards, positions, lag"),
    "offsets": ("cdcworker.admin.offsets", "List, reset or set a stopped connector's offsets (Connect format), or hand them back to Debezium"),
    "validate": ("cdcworker.admin.validate", "Check a connector YAML or worker properties as the worker would"),
    "tail": ("cdcworker.admin.tail", "Decode and pretty-print the change events of a topic"),
    "verify": ("cdcworker.admin.verify", "Check that a change-event topic, materialised, equals the source table"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardcdc", description="Change data capture for sharded MySQL (Vitess).")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        # add_help=False: `shardcdc <cmd> --help` reaches the subcommand's own parser.
        sub = subparsers.add_parser(name, help=help_text, description=help_text, add_help=False)
        sub.set_defaults(command_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Two-phase parse: find the subcommand, let its module add its own arguments, then parse fully.
    known, _ = parser.parse_known_args(args_list)
    if known.version:
        from cdcworker import __version__

        print(__version__)
        return 0
    if not known.command:
        parser.print_help()
        return 2
    module = importlib.import_module(known.command_module)
    sub = argparse.ArgumentParser(prog=f"shardcdc {known.command}", description=SUBCOMMANDS[known.command][1])
    run: Callable[[argparse.Namespace], int] = module.register(sub)
    sub_args = sub.parse_args(args_list[args_list.index(known.command) + 1 :])
    return int(run(sub_args) or 0)


if __name__ == "__main__":
    sys.exit(main())
