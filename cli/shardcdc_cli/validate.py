"""``shardcdc validate -f FILE``: check a connector before deploying it, with the worker's own checks.

* a worker ``.properties`` file: loaded and validated exactly as ``shardcdc worker`` does at start
  (environment variables are ignored, so the file alone is judged);
* a CdcConnector YAML (several documents allowed; other kinds are skipped): the spec is parsed as the operator parses it,
  ``spec.config`` may not set keys the operator owns (the CRD's CEL rules reject them too), and the
  worker configuration the operator would write for a task is validated with the worker's checks.
  Secret references become placeholders: Secrets are the cluster's, not checked here.

Exit codes: 0 valid, 1 invalid (every problem is listed), 2 the file cannot be read.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

from cdcoperator.connectorcheck import connector_documents, connector_label, validate_connector
from cdcoperator.manifest import ManifestError, load_documents
from cdcworker.config import ConfigError, load_config

__all__ = ["register", "validate_properties"]


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("-f", "--file", action="append", required=True,
                        help="a CdcConnector YAML or a worker .properties file (repeatable)")
    return run


def validate_properties(path: str) -> list[str]:
    """Problems of a worker properties file ([] when valid)."""
    try:
        load_config([path], env={})
    except ConfigError as exc:
        return exc.messages
    return []


def _check_file(path: str) -> list[tuple[str, list[str]]]:
    """(what, problems) for each connector in the file (``ManifestError``: it cannot be read)."""
    if not path.endswith((".yaml", ".yml", ".json")):
        return [(path, validate_properties(path))]
    out = [(f"{path} CdcConnector/{connector_label(doc, i)}", validate_connector(doc))
           for i, doc in connector_documents(load_documents(path))]
    if not out:
        out.append((path, ["no CdcConnector in the file"]))
    return out


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    out = console or Console()
    invalid = False
    for path in args.file:
        try:
            results = _check_file(path)
        except ManifestError as exc:
            Console(stderr=True).print(f"shardcdc validate: {exc}", markup=False, soft_wrap=True)
            return 2
        except OSError as exc:
            Console(stderr=True).print(f"shardcdc validate: cannot read {path}: {exc}", markup=False, soft_wrap=True)
            return 2
        for what, problems in results:
            if problems:
                invalid = True
                out.print(f"[red]invalid[/] {escape(what)}: {len(problems)} problem{'s' if len(problems) != 1 else ''}",
                          soft_wrap=True)
                for p in problems:
                    out.print(f"  - {p}", markup=False, highlight=False, soft_wrap=True)
            else:
                out.print(f"[green]valid[/] {escape(what)}", soft_wrap=True)
    return 1 if invalid else 0
