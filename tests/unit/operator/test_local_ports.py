"""The ports that local mode and the dev kit choose (cdcoperator.local.ports: the real-Vitess fixtures,
brokers, API servers, Prometheus, pods) come from below the kernel's ephemeral range, where no outgoing
connection can take them between their choice and the child process's bind, and never twice while
they may still be waiting for that bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cdcoperator.local.ports import PORT_RANGE_ENV, below_ephemeral, free_port, free_port_block, port_range


def _ephemeral() -> tuple[int, int]:
    start, end = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2])
    return start, end


def test_the_range_lies_outside_the_ephemeral_range() -> None:
    start, end = _ephemeral()
    low, high = below_ephemeral()
    assert high <= start or low > end, (low, high, start, end)
    assert below_ephemeral(floor=10000) == (10000, start) or start - 10000 < 1000


def test_port_blocks_are_free_and_outside_the_ephemeral_range() -> None:
    low, high = below_ephemeral()
    for _ in range(20):
        base = free_port_block(7)
        assert low <= base and base + 6 < high, (base, low, high)
        socks = [socket.socket() for _ in range(7)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))  # every port of the block is free
        finally:
            for s in socks:
                s.close()


def test_ports_chosen_before_any_is_bound_all_differ() -> None:
    low, high = below_ephemeral()
    ports = [free_port() for _ in range(500)] + [free_port_block(3) + i for _ in range(50) for i in range(3)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if not low <= p < high]


def test_a_port_range_from_the_environment_is_kept_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "21000-23000")
    assert port_range() == (21000, 23000)
    ports = [free_port() for _ in range(50)] + [free_port_block(4) + i for _ in range(10) for i in range(4)]
    assert all(21000 <= p < 23000 for p in ports), ports
    monkeypatch.setenv(PORT_RANGE_ENV, "")
    assert port_range() == below_ephemeral()


@pytest.mark.parametrize("text", ["21000", "a-b", "21000-21050", "80-2000", "30000-20000", "60000-70000"])
def test_a_bad_port_range_is_one_line_that_says_the_form(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, text)
    with pytest.raises(ValueError, match=rf"^SHARDCDC_PORT_RANGE='{text}': give <low>-<high>, .*or unset it$"):
        free_port()
