"""The ``shardcdc`` command: one entry point, subcommands registered per concern.

Each subcommand lives next to the code it drives; this module only maps names to
``(module, function)`` pairs and imports the module when the subcommand runs, so
``shardcdc --help`` stays fast and the worker image needs no Spark or Kubernetes code.

The CLI sits on top of the product (CLI -> operator -> worker) and never names development-kit
code: commands that run test servers (``demo``, ``vtgate-sim``) are registered by devkit packages
in the ``shardcdc.commands`` entry-point group (pyproject.toml) and found here at run time, so a
product install without devkit simply lacks them (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from cdcworker import __version__

# name -> (module, "register" function that adds the subparser's arguments and sets `func`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "worker": ("cdcworker.run", "Run one connector task: stream its shards into Kafka"),
    "operator": ("cdcoperator.cli", "Run the CdcConnector operator (kopf): per-task workers, generations, resharding"),
    "backfill": ("cdcworker.backfill.cli", "Run a snapshot backfill (Spark or local) with a live progress view"),
    "run": ("cdcoperator.local.run", "Run a CdcConnector on this machine (local mode: worker processes, no Kubernetes)"),
    "scale": ("cdcoperator.local.scale", "Change the task count of a connector running in local mode"),
    "annotate": ("cdcoperator.local.annotate", "Set or remove an annotation of a connector running in local mode"),
    "status": ("shardcdc_cli.status", "Show a connector: generation, tasks, shards, positions, lag"),
    "offsets": ("shardcdc_cli.offsets", "List, reset or set a stopped connector's offsets (Connect format), or hand them back to Debezium"),
    "validate": ("shardcdc_cli.validate", "Check a connector YAML or worker properties as the worker would"),
    "tail": ("shardcdc_cli.tail", "Decode and pretty-print the change events of a topic"),
    "verify": ("shardcdc_cli.verify", "Check that a change-event topic, materialised, equals the source table"),
}


PLUGIN_GROUP = "shardcdc.commands"
# Named when a plugin command is asked for but not installed (a product-only install).
PLUGIN_HINT = "install shardcdc from a checkout with the development kit (pip install -e '.[demo]', or make demo)"


def plugin_commands(describe: bool = False) -> dict[str, tuple[str, str]]:
    """name -> (module, help) of the commands devkit packages register in ``shardcdc.commands``.
    The help is the module's ``HELP``, read only when ``describe`` (listing them imports them)."""
    found: dict[str, tuple[str, str]] = {}
    for ep in entry_points(group=PLUGIN_GROUP):
        if ep.name in SUBCOMMANDS:
            continue  # a product command is never shadowed by a plugin
        help_text = str(getattr(importlib.import_module(ep.module), "HELP", "")) if describe else ""
        found[ep.name] = (ep.module, help_text or f"(development kit) see shardcdc {ep.name} --help")
    return found


def unknown_command(name: str) -> str:
    """One line for a command that is neither the product's nor an installed plugin's."""
    known = ", ".join([*SUBCOMMANDS, *plugin_commands()])
    return (f"shardcdc: unknown command {name!r} (commands: {known}); development-kit commands such as demo "
            f"and vtgate-sim need the kit: {PLUGIN_HINT}")


def build_parser(describe_plugins: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardcdc", description="Change data capture for sharded MySQL (Vitess).",
                                     epilog=f"Development-kit commands (demo, vtgate-sim) are listed when the kit is "
                                            f"installed: {PLUGIN_HINT}.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in {**SUBCOMMANDS, **plugin_commands(describe_plugins)}.items():
        # add_help=False: `shardcdc <cmd> --help` reaches the subcommand's own parser.
        sub = subparsers.add_parser(name, help=help_text, description=help_text, add_help=False)
        sub.set_defaults(command_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and not args_list[0].startswith("-") and args_list[0] not in {**SUBCOMMANDS, **plugin_commands()}:
        print(unknown_command(args_list[0]), file=sys.stderr)
        return 2
    parser = build_parser(describe_plugins=not args_list or args_list[0] in ("-h", "--help"))
    # Two-phase parse: find the subcommand, let its module add its own arguments, then parse fully.
    known, _ = parser.parse_known_args(args_list)
    if known.version:
        print(__version__)
        return 0
    if not known.command:
        parser.print_help()
        return 2
    module = importlib.import_module(known.command_module)
    help_text = SUBCOMMANDS[known.command][1] if known.command in SUBCOMMANDS else getattr(module, "HELP", None)
    sub = argparse.ArgumentParser(prog=f"shardcdc {known.command}", description=help_text)
    run: Callable[[argparse.Namespace], int] = module.register(sub)
    sub_args = sub.parse_args(args_list[args_list.index(known.command) + 1 :])
    return int(run(sub_args) or 0)


if __name__ == "__main__":
    sys.exit(main())
