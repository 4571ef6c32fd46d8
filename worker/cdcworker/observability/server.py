"""The worker's HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz`` and ``/status``.

Stdlib ``http.server`` in a daemon thread, so a scrape never runs on the streaming loop and the
worker needs no web framework. Each request reads the TaskMetrics snapshot; nothing here writes it.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, ClassVar

import orjson
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from cdcworker.observability.health import liveness, readiness

if TYPE_CHECKING:
    from cdcworker.observability.metrics import TaskMetrics

__all__ = ["ObservabilityServer", "serve"]

log = logging.getLogger(__name__)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive for scrapers and probes
    routes: ClassVar[dict[str, str]] = {
        "/metrics": "_metrics",
        "/healthz": "_healthz",
        "/livez": "_healthz",
        "/readyz": "_readyz",
        "/status": "_status",
    }

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def _dispatch(self, send_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        route = self.routes.get(path)
        try:
            if route is None:
                status, ctype, body = 404, "text/plain; charset=utf-8", b"not found\n"
            else:
                status, ctype, body = getattr(self, route)()
        except Exception:  # a broken collector must not kill the endpoint thread
            log.exception("error serving %s", path)
            status, ctype, body = 500, "text/plain; charset=utf-8", b"internal error\n"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _metrics(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_PLAIN_0_0_4, generate_latest(self.server.metrics.registry)

    def _healthz(self) -> tuple[int, str, bytes]:
        v = liveness(self.server.metrics)
        return (200 if v.ok else 503), "text/plain; charset=utf-8", v.body()

    def _readyz(self) -> tuple[int, str, bytes]:
        v = readiness(self.server.metrics)
        return (200 if v.ok else 503), "text/plain; charset=utf-8", v.body()

    def _status(self) -> tuple[int, str, bytes]:
        return 200, "application/json", orjson.dumps(self.server.metrics.status())

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], metrics: TaskMetrics) -> None:
        self.metrics = metrics
        super().__init__(address, _Handler)


class ObservabilityServer:
    """Serves one TaskMetrics. ``port=0`` binds an ephemeral port (tests); see :func:`serve`."""

    def __init__(self, metrics: TaskMetrics, port: int, host: str = "0.0.0.0") -> None:
        self._server = _Server((host, port), metrics)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}"

    def start(self) -> ObservabilityServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name="shardcdc-http",
                daemon=True,
            )
            self._thread.start()
            log.info("metrics, health and status on port %d", self.port)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ObservabilityServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(metrics: TaskMetrics, port: int, host: str = "0.0.0.0") -> ObservabilityServer | None:
    """Start the endpoint on ``shardcdc.metrics.port``; 0 there means disabled (returns None)."""
    if port == 0:
        return None
    return ObservabilityServer(metrics, port, host).start()
