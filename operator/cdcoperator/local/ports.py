"""Free TCP ports on 127.0.0.1 for processes that bind them later (local mode's pods, the dev kit's
brokers, API servers and Vitess processes).

A port is chosen here and bound by another process seconds later (a JVM, a tablet after its
``mysqlctl init``, a worker's interpreter start). A port that ``bind(0)`` returned lies in the
kernel's ephemeral range, from which any outgoing connection on the machine may take it as its
local port in the meantime: the child then fails with "address already in use" (real-Vitess tablets
did, on a machine busy with other tests). Ports below that range are never given to outgoing
connections. This process does not hand out a port again while it is among its recent choices, so
two choices made before either is bound differ. Processes that choose ports side by side (two
``shardcdc run`` on one machine, parallel test workers) keep apart by each taking its own range:
``SHARDCDC_PORT_RANGE=<low>-<high>``, inherited by the processes each starts.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from collections import deque
from pathlib import Path

LOCAL_IP = "127.0.0.1"
PORT_RANGE_ENV = "SHARDCDC_PORT_RANGE"

_recent: deque[int] = deque(maxlen=4096)
_lock = threading.Lock()


def free_port() -> int:
    """One free port below the ephemeral range."""
    return free_port_block(1)


def free_port_block(count: int, tries: int = 200) -> int:
    """A base port with ``count`` consecutive free ports from it, below the ephemeral range."""
    low, high = port_range()
    with _lock:
        for _ in range(tries):
            base = random.randrange(low, high - count)
            block = range(base, base + count)
            if any(p in _recent for p in block) or not _bindable(block):
                continue
            _recent.extend(block)
            return base
    raise RuntimeError(f"no {count} consecutive free ports found in {low}-{high}")


def _bindable(ports: range) -> bool:
    socks: list[socket.socket] = []
    try:
        for p in ports:
            s = socket.socket()
            socks.append(s)
            s.bind((LOCAL_IP, p))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def port_range() -> tuple[int, int]:
    """Where ports are chosen: ``SHARDCDC_PORT_RANGE`` (low-high, high excluded) or
    ``below_ephemeral()``."""
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return below_ephemeral()
    try:
        low, high = (int(v) for v in text.split("-"))
    except ValueError:
        low = high = 0
    if not 1024 <= low < high <= 65536 or high - low < 100:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: give <low>-<high>, 1024 <= low, high <= 65536 and "
                         "at least 100 ports apart (for example 10000-20000), or unset it")
    return low, high


def below_ephemeral(floor: int = 10000) -> tuple[int, int]:
    """Ports from ``floor`` up to the start of ``net.ipv4.ip_local_port_range`` (32768 by default),
    or above its end when it starts too low to leave room."""
    try:
        start, end = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
    except (OSError, ValueError):
        start, end = 32768, 60999
    if start - floor >= 1000:
        return floor, start
    return (end + 1, 65535) if 65535 - end >= 1000 else (floor, 65535)
