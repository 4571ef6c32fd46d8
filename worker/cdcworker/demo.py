"""``shardcdc demo``: the main job on embedded defaults.

Until the worker lands this starts the local Kafka broker, prints its address and a round-trip
check, and stops it cleanly.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("--hold", type=float, default=0.0, help="keep the broker up this many seconds before stopping")
    return run


def run(args: argparse.Namespace) -> int:
    import time

    from localkafka import KafkaBroker, consume_all, create_topics, produce

    with KafkaBroker() as broker:
        print(f"Kafka broker (KRaft, single node) listening on {broker.bootstrap}")
        create_topics(broker.bootstrap, ["shardcdc.demo"])
        produce(broker.bootstrap, "shardcdc.demo", [(b"k", b"hello from shardcdc")])
        records = consume_all(broker.bootstrap, "shardcdc.demo")
        print(f"round trip ok: {records[0].value!r}")
        if args.hold > 0:
            time.sleep(args.hold)
    print("broker stopped")
    return 0
