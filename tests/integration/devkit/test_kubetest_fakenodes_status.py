"""FakeNodes' status ports: every task's ``/status`` served by one thread, whatever the task count.

At 10 connectors of 256 shards a thread per port made the harness the machine's load; the ports
must stay one thread, each answer its own Deployment's scripted document, count the reads and keep
a connection open across requests, as the worker's server does.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.error
import urllib.request
from typing import Any, cast

import pytest

from cdcoperator.apply import KubeApi
from kubetest.fakenodes import FakeNodes, streaming_doc

TASKS = 64


def get(port: int, path: str = "/status") -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_status_ports_share_one_thread_and_answer_their_own_document() -> None:
    # No API server: only the status ports are exercised (the sync loop is never started).
    nodes = FakeNodes(cast(KubeApi, None), "ns")
    before = set(threading.enumerate())
    try:
        ports = {f"d{i}": nodes.status_port(f"d{i}") for i in range(TASKS)}
        assert len(set(ports.values())) == TASKS
        # No thread started (the one serving thread existed already); a set, not a count: a thread
        # an earlier test left may end meanwhile (CI: 3 -> 2).
        assert set(threading.enumerate()) <= before
        nodes.set_doc("d7", {"state": "failed", "ready": False})
        assert get(ports["d7"]) == (200, {"state": "failed", "ready": False})
        assert get(ports["d8"]) == (200, streaming_doc())
        assert get(ports["d8"], "/metrics")[0] == 404
        assert (nodes.reads("d7"), nodes.reads("d8"), nodes.reads("d9")) == (1, 2, 0)
        assert nodes.status_port("d7") == ports["d7"]  # a Deployment keeps its port
        # Keep-alive, as the worker's own server: two requests on one connection (aiohttp reuses it).
        conn = http.client.HTTPConnection("127.0.0.1", ports["d9"], timeout=10)
        for _ in range(2):
            conn.request("GET", "/status")
            resp = conn.getresponse()
            assert (resp.status, json.load(resp)) == (200, streaming_doc())
        conn.close()
        assert nodes.reads("d9") == 2
    finally:
        nodes._servers.close()
    with pytest.raises(OSError):
        get(ports["d7"])
