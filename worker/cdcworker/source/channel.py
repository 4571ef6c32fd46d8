"""gRPC channels to VTGate: TLS, static credentials, headers, keepalive, message size.

Vitess' static auth (``grpcclient.StaticAuthClientCreds``) sends ``username`` and ``password`` as
per-call metadata; custom ``vitess.grpc.headers`` ride along the same way. The password never
appears in a log line or an exception message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.experimental


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Client TLS: CA bundle to verify VTGate, optional client cert/key for mTLS, name override."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    target: str  # host:port
    tls: TlsSettings | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    max_inbound_message_size: int = 4 * 1024 * 1024
    keepalive_ms: int = 0  # 0 = gRPC default (no client pings)
    keepalive_timeout_ms: int = 20_000

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        """Metadata for every call: static credentials first, then custom headers."""
        meta: list[tuple[str, str]] = []
        if self.user:
            meta.append(("username", self.user))
            meta.append(("password", self.password or ""))
        meta.extend((k.lower(), v) for k, v in self.headers)
        return tuple(meta)


def parse_headers(spec: str) -> tuple[tuple[str, str], ...]:
    """Parse Debezium's ``vitess.grpc.headers`` (``k1:v1,k2:v2``)."""
    out: list[tuple[str, str]] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition(":")
        if not sep or not key.strip():
            raise ValueError(f"vitess.grpc.headers entry {part!r} is not of the form name:value")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _options(settings: ChannelSettings) -> Sequence[tuple[str, int | str]]:
    opts: list[tuple[str, int | str]] = [
        ("grpc.max_receive_message_length", settings.max_inbound_message_size),
        ("grpc.max_send_message_length", 16 * 1024 * 1024),
        # A streaming call is read on the thread that iterates it, not handed over by gRPC's
        # channel spin thread: one thread and one GIL hand-off less per response, which was a
        # third of the worker's CPU at 20 rows per transaction (BENCHMARKS.md).
        (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
    ]
    if settings.keepalive_ms > 0:
        opts += [
            ("grpc.keepalive_time_ms", settings.keepalive_ms),
            ("grpc.keepalive_timeout_ms", settings.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    if settings.tls and settings.tls.server_name:
        opts.append(("grpc.ssl_target_name_override", settings.tls.server_name))
    return opts


def tls_channel(
    target: str,
    ca: bytes | None,
    key: bytes | None,
    cert: bytes | None,
    server_name: str | None = None,
    options: Sequence[tuple[str, int | str]] = (),
) -> grpc.Channel:
    """A TLS channel from PEM bytes (no CA: the system roots); the operator's discovery uses it too."""
    opts = list(options)
    if server_name and not any(k == "grpc.ssl_target_name_override" for k, _ in opts):
        opts.append(("grpc.ssl_target_name_override", server_name))
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return grpc.secure_channel(target, creds, options=opts)


def open_channel(settings: ChannelSettings) -> grpc.Channel:
    """A plaintext or TLS channel to VTGate with the configured limits."""
    options = _options(settings)
    if settings.tls is None:
        return grpc.insecure_channel(settings.target, options=options)
    tls = settings.tls
    return tls_channel(
        settings.target,
        tls.ca_file.read_bytes() if tls.ca_file else None,
        tls.key_file.read_bytes() if tls.key_file else None,
        tls.cert_file.read_bytes() if tls.cert_file else None,
        options=options,
    )
