"""The real-Vitess fixtures' ports come from below the kernel's ephemeral range, where no outgoing
connection can take them between their choice and the Vitess process's bind."""

from __future__ import annotations

import socket
from pathlib import Path

from realvitess.single import free_port_block


def test_port_blocks_are_free_and_outside_the_ephemeral_range() -> None:
    start, end = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
    for _ in range(20):
        base = free_port_block(7)
        assert not start <= base <= end and not start <= base + 6 <= end, (base, start, end)
        socks = [socket.socket() for _ in range(7)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))  # every port of the block is free
        finally:
            for s in socks:
                s.close()
