"""``shardcdc worker``: run one task from a configuration file (the pod's main process)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable

log = logging.getLogger("cdcworker")


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="connector configuration (.properties, .json or .yaml); repeat to layer files; "
        "SHARDCDC_* environment variables override",
    )
    parser.add_argument("--validate-only", action="store_true", help="check the configuration and exit")
    return run


def run(args: argparse.Namespace) -> int:
    # A stop request can arrive while the heavy imports and the config load run: remember it instead of
    # dying on the default SIGTERM action, and hand it to the task once it exists.
    early_stops: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: early_stops.append(received))
    from cdcworker.config import load_config_or_exit

    logging.basicConfig(
        level=os.environ.get("SHARDCDC_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    files = args.config or ([os.environ["SHARDCDC_CONFIG"]] if os.environ.get("SHARDCDC_CONFIG") else [])
    config = load_config_or_exit(files)
    if args.validate_only:
        print("configuration is valid")
        return 0
    from cdcworker.task import WorkerTask

    task = WorkerTask(config)
    task.install_signal_handlers()
    if early_stops:
        task.stop(f"signal {signal.Signals(early_stops[0]).name} received during start-up")
    log.info("worker %s task %s starting", config.name, config.task.context_task_id)
    result = task.run()
    level = logging.INFO if result.exit_code == 0 else logging.ERROR
    log.log(level, "worker exiting with status %d: %s", result.exit_code, result.reason)
    return result.exit_code
