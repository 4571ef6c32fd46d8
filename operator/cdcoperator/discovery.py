"""Serving shards of the source keyspace: from vtctld when configured, otherwise from VTGate.

* vtctld: ``GetSrvKeyspaces`` gives, per cell, the partition of shards that serve the connector's
  tablet type (what VTGate routes to); ``FindAllShardsInKeyspace`` gives every shard record (also
  the reshard targets that do not serve yet), reported as ``discovered``. When no cell has a
  SrvKeyspace (a keyspace never rebuilt) the shard records' ``is_primary_serving`` flag decides.
* VTGate only: ``SHOW VITESS_SHARDS LIKE '<keyspace>/%'`` (what Debezium's VitessMetadata runs),
  which lists serving shards only; ``discovered`` then equals ``serving``.

Blocking gRPC; the operator calls :func:`discover` in a worker thread. Every failure becomes a
:class:`DiscoveryError` whose message names the endpoint and the gRPC status, so the ``Degraded``
condition tells the user what to fix.

A source with ``tls.enabled`` or ``credentials`` is reached as the workers reach it: over TLS with
the CA and client certificate of its Secrets, and Vitess' static-auth ``username``/``password``
call metadata. :func:`source_access` reads those Secrets (``get`` on Secrets: the chart's
``rbac.sourceSecrets``); TLS with neither a CA nor a client certificate needs no Secret (the
system roots). The material stays in memory and out of every message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from cdcoperator.model import ConnectorResource, VitessSource
from cdcworker.config.loader import strip_final_newline
from cdcworker.keyrange import sort_shards
from cdcworker.source.channel import tls_channel
from vitessapi import topodata_pb2, vtctldata_pb2, vtctlservice_pb2_grpc, vtgate_pb2, vtgateservice_pb2_grpc

__all__ = [
    "DEFAULT_TIMEOUT",
    "Discovery",
    "DiscoveryError",
    "SecretReader",
    "SourceAccess",
    "discover",
    "discover_via_vtctld",
    "discover_via_vtgate",
    "source_access",
]

DEFAULT_TIMEOUT = 10.0
ChannelFactory = Callable[[str], grpc.Channel]
Metadata = Sequence[tuple[str, str]]
# (namespace, name) -> the Secret's data, None when it does not exist; raises an error with a
# ``status`` of 403 when the operator may not read it (cdcoperator.apply.ApiError).
SecretReader = Callable[[str, str], Awaitable[Mapping[str, bytes] | None]]


class DiscoveryError(RuntimeError):
    """The shard list could not be had; the message is user-facing (it lands in a condition)."""


@dataclass(frozen=True, slots=True)
class Discovery:
    serving: tuple[str, ...]  # shards serving the connector's tablet type, in key range order
    discovered: tuple[str, ...]  # every shard record known (serving or not), in key range order
    via: str  # "vtctld" | "vtgate"


def _insecure(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address)


@dataclass(frozen=True, slots=True)
class SourceAccess:
    """How discovery reaches the source: TLS material and call metadata (never printed)."""

    tls: bool = False
    ca: bytes | None = field(default=None, repr=False)
    cert: bytes | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None
    metadata: Metadata = field(default=(), repr=False)

    def channel(self, address: str) -> grpc.Channel:
        if not self.tls:
            return grpc.insecure_channel(address)
        return tls_channel(address, self.ca, self.key, self.cert, self.server_name)


PLAINTEXT = SourceAccess()


async def source_access(cr: ConnectorResource, read_secret: SecretReader) -> SourceAccess:
    """What reaching the server discovery asks takes, read from the Secrets the spec names.

    That server is vtctld when ``spec.source.vitess.vtctld`` is set: its own ``vtctldTls`` (off:
    plaintext) and no credentials (VTGate's static auth is VTGate's); otherwise VTGate with ``tls``
    and ``credentialsSecretRef``, as the workers reach it.
    """
    vt = cr.spec.source
    tls, field_name = (vt.vtctld_tls, "vtctldTls") if vt.vtctld else (vt.tls, "tls")
    credentials = None if vt.vtctld else vt.credentials
    if not tls.enabled and credentials is None:
        return PLAINTEXT

    async def secret(name: str, keys: Sequence[str], what: str) -> list[bytes]:
        try:
            data = await read_secret(cr.namespace, name)
        except Exception as exc:
            if getattr(exc, "status", None) != 403:
                raise DiscoveryError(f"reading Secret {cr.namespace}/{name} ({what}) failed: {exc}") from None
            raise DiscoveryError(
                f"the operator may not read Secret {cr.namespace}/{name} ({what}), which listing the shards of a "
                "source with TLS or credentials needs: install the chart with rbac.sourceSecrets=true (get on "
                "Secrets), or bind that rule to the operator's ServiceAccount yourself"
            ) from None
        if data is None:
            raise DiscoveryError(f"Secret {cr.namespace}/{name} ({what}) does not exist")
        missing = [k for k in keys if k not in data]
        if missing:
            raise DiscoveryError(f"Secret {cr.namespace}/{name} ({what}) has no key {', '.join(missing)}")
        return [bytes(data[k]) for k in keys]

    ca = cert = key = None
    if tls.enabled and tls.ca_secret_ref is not None:
        (ca,) = await secret(tls.ca_secret_ref.name, (tls.ca_secret_ref.key,),
                             f"spec.source.vitess.{field_name}.caSecretRef")
    if tls.enabled and tls.client_cert_secret_ref is not None:
        cert, key = await secret(tls.client_cert_secret_ref, ("tls.crt", "tls.key"),
                                 f"spec.source.vitess.{field_name}.clientCertSecretRef")
    metadata: list[tuple[str, str]] = []
    if credentials is not None:
        user, password = await secret(credentials.name, (credentials.username_key, credentials.password_key),
                                      "spec.source.vitess.credentialsSecretRef")
        # Vitess' static auth (grpcclient.StaticAuthClientCreds): per-call metadata, exactly as the
        # workers send it (they read the Secret's files without one final line end).
        try:
            metadata = [("username", strip_final_newline(user.decode())),
                        ("password", strip_final_newline(password.decode()))]
        except UnicodeDecodeError:
            raise DiscoveryError(f"Secret {cr.namespace}/{credentials.name} (spec.source.vitess.credentialsSecretRef) "
                                 "holds a username or password that is not UTF-8") from None
    return SourceAccess(tls.enabled, ca, cert, key, tls.server_name, tuple(metadata))


def _describe(exc: grpc.RpcError, what: str, address: str) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    name = code.name if code is not None else "ERROR"
    return f"{what} at {address} failed: {name}: {details}"


def _tablet_type(name: str) -> int:
    upper = name.upper()
    return int(topodata_pb2.PRIMARY if upper in ("PRIMARY", "MASTER") else topodata_pb2.TabletType.Value(upper))


def discover_via_vtctld(
    address: str,
    keyspace: str,
    tablet_type: str = "PRIMARY",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    channel_factory: ChannelFactory = _insecure,
    metadata: Metadata = (),
) -> Discovery:
    wanted = _tablet_type(tablet_type)
    with channel_factory(address) as channel:
        stub = vtctlservice_pb2_grpc.VtctldStub(channel)
        try:
            found = stub.FindAllShardsInKeyspace(
                vtctldata_pb2.FindAllShardsInKeyspaceRequest(keyspace=keyspace), timeout=timeout, metadata=metadata
            )
            srv = stub.GetSrvKeyspaces(
                vtctldata_pb2.GetSrvKeyspacesRequest(keyspace=keyspace), timeout=timeout, metadata=metadata
            )
        except grpc.RpcError as exc:
            raise DiscoveryError(_describe(exc, f"vtctld FindAllShardsInKeyspace/GetSrvKeyspaces({keyspace})",
                                           address)) from None
    discovered = sort_shards(found.shards.keys())
    serving: set[str] = set()
    have_srv = False
    for srv_keyspace in srv.srv_keyspaces.values():
        for partition in srv_keyspace.partitions:
            if int(partition.served_type) == wanted:
                have_srv = True
                serving.update(ref.name for ref in partition.shard_references)
    if not have_srv:
        # No SrvKeyspace yet: fall back to the shard records (PRIMARY serving flag).
        serving = {name for name, rec in found.shards.items() if rec.shard.is_primary_serving}
    return Discovery(tuple(sort_shards(serving)), tuple(discovered), "vtctld")


def discover_via_vtgate(
    address: str,
    keyspace: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    channel_factory: ChannelFactory = _insecure,
    metadata: Metadata = (),
) -> Discovery:
    request = vtgate_pb2.ExecuteRequest(
        session=vtgate_pb2.Session(autocommit=True),
        query={"sql": f"/*vt+ WORKLOAD_NAME=shardcdc-operator */ SHOW VITESS_SHARDS LIKE '{keyspace}/%'"},
    )
    with channel_factory(address) as channel:
        try:
            response = vtgateservice_pb2_grpc.VitessStub(channel).Execute(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as exc:
            raise DiscoveryError(_describe(exc, "vtgate SHOW VITESS_SHARDS", address)) from None
    if response.HasField("error") and response.error.message:
        raise DiscoveryError(f"vtgate SHOW VITESS_SHARDS at {address} failed: {response.error.message}")
    shards = []
    for row in response.result.rows:
        ks, _, shard = bytes(row.values).decode().partition("/")
        if ks == keyspace and shard:
            shards.append(shard)
    ordered = tuple(sort_shards(shards))
    return Discovery(ordered, ordered, "vtgate")


def discover(
    source: VitessSource,
    *,
    access: SourceAccess = PLAINTEXT,
    timeout: float = DEFAULT_TIMEOUT,
    channel_factory: ChannelFactory | None = None,
    metadata: Metadata = (),
) -> Discovery:
    """Serving shards of ``source.keyspace`` (vtctld if configured, else VTGate), reached with ``access``."""
    factory = channel_factory if channel_factory is not None else access.channel
    meta = (*access.metadata, *metadata)
    if source.vtctld:
        return discover_via_vtctld(source.vtctld, source.keyspace, source.tablet_type, timeout=timeout,
                                   channel_factory=factory, metadata=meta)
    return discover_via_vtgate(source.vtgate, source.keyspace, timeout=timeout, channel_factory=factory,
                               metadata=meta)
