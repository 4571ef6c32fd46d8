"""``shardcdc annotate <name> KEY=VALUE``: set (or with ``KEY-`` remove) an annotation of a connector
running in local mode, as ``kubectl annotate cdc/<name> KEY=VALUE`` does in a cluster.

The operator's one-shot requests are annotations (``shardcdc.io/offsets-lost=restore``,
``shardcdc.io/restart``...): the instance started by ``shardcdc run`` gets the change through its
control endpoint and its reconcile acts on it as the operator would.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["parse_annotation", "register"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("name", help="the connector's metadata.name")
    parser.add_argument("annotation", help="KEY=VALUE to set, KEY- to remove (kubectl's syntax)")
    parser.add_argument("-n", "--namespace", default="default", help="the connector's namespace (default: default)")
    parser.add_argument("--state-dir", type=Path, default=None, help="the state directory given to `shardcdc run`")
    return run


def parse_annotation(text: str) -> tuple[str, str | None]:
    """``KEY=VALUE`` -> (key, value); ``KEY-`` -> (key, None). ValueError names what is wrong."""
    if text.endswith("-") and "=" not in text:
        key, value = text[:-1], None
    else:
        key, sep, value = text.partition("=")
        if not sep:
            raise ValueError(f"{text!r}: expected KEY=VALUE (or KEY- to remove it)")
    if not key or any(c.isspace() for c in key):
        raise ValueError(f"{text!r}: the annotation key must be a non-empty name without spaces")
    return key, value


def run(args: argparse.Namespace) -> int:
    from cdcoperator.local.control import ControlClient, ControlError

    try:
        key, value = parse_annotation(args.annotation)
        ControlClient.find(args.name, args.namespace, args.state_dir).patch(
            {"metadata": {"annotations": {key: value}}})
    except (ValueError, ControlError) as exc:
        print(f"shardcdc annotate: {exc}", file=sys.stderr)
        return 1
    print(f"cdcconnector.shardcdc.io/{args.name} annotated")
    return 0
