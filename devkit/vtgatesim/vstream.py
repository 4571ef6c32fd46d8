"""The vtgate-level VStream engine: resolve the request, run one shard stream per ShardGtid,
rewrite positions into whole-stream VGTIDs, follow reshard journals, and hand finished
`VStreamResponse` bytes to the gRPC layer.

Responses are built from pre-encoded pieces (see wire.py); a transaction's responses are queued
contiguously under the stream lock, as vtgate's sendAll does. Like vtgate, each shard transaction
(or each tablet packet of a large one) is its own `VStreamResponse`: vtgate calls sendAll at every
COMMIT/DDL/OTHER even when the tablet delivered several transactions in one batch, so transactions
are never merged into one response.

Hot path: a streaming transaction is rendered from a per-entry template cached per stream
configuration (`TxnTemplate`): the ROW/BEGIN/COMMIT bytes with slots for `current_time` (a fixed
11-byte field, so `ct.join(parts)` renders a response in one call) and for the stream VGTID.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vitessapi import binlogdata_pb2, query_pb2

from . import binlog as bl
from . import mysqltypes, wire
from .executor import FAILED_PRECONDITION, INTERNAL, INVALID_ARGUMENT, UNAVAILABLE, UNKNOWN, VTError
from .filters import FilterError, Rules, TablePlan, compile_regexp, plan_fields, project, row_matches
from .gtid import GtidParseError, GtidSet
from .schema import TableSchema
from .topology import CELL, Shard

if TYPE_CHECKING:
    from .faults import FaultPlan
    from .sim import VTGateSim

DEFAULT_PACKET_SIZE = 250_000
STOP_ON_RESHARD_DELAY = 0.5
OUTBOX_MAX = 256  # responses buffered between the shard streams and the gRPC sender
_END = object()
CT_LEN = len(wire.ct_field(time.time_ns()))  # 11 bytes for any time between 1972 and 2262


MAX_SKEW = 2  # seconds (vstream_manager.go MaxSkew)
CANCELED = 1  # vtrpc.Code


@dataclass
class Flags:
    heartbeat_interval: int = 0
    stop_on_reshard: bool = False
    stream_keyspace_heartbeats: bool = False
    include_reshard_journal_events: bool = False
    tables_to_copy: list[str] = field(default_factory=list)
    exclude_keyspace_from_table_name: bool = False
    transaction_chunk_size: int = 0
    minimize_skew: bool = False


class SGtid:
    """One entry of the stream's VGtid (mutated under the stream lock)."""

    __slots__ = ("_head", "enc", "gtid", "keyspace", "shard", "table_pks")

    def __init__(self, keyspace: str, shard: str, gtid: str, table_pks: list[binlogdata_pb2.TableLastPK]) -> None:
        self.keyspace, self.shard, self.gtid = keyspace, shard, gtid
        self.table_pks = table_pks
        self._head = wire.f_str(1, keyspace) + wire.f_str(2, shard)
        self.enc = b""
        self.encode()

    def encode(self) -> None:
        body = self._head + wire.f_str(3, self.gtid)
        if self.table_pks:
            body += b"".join(wire.f_msg(4, pk.SerializeToString()) for pk in self.table_pks)
        self.enc = wire.f_msg(1, body)

    def set_gtid(self, gtid: str, encoded: bytes) -> None:
        """Fast path for a streaming position update (no table_p_ks): `encoded` is gtid.encode()."""
        self.gtid = gtid
        if self.table_pks:
            self.encode()
            return
        body = self._head + (wire.tag(3, 2) + wire.uvarint(len(encoded)) + encoded if encoded else b"")
        self.enc = b"\x0a" + wire.uvarint(len(body)) + body


class Outbox:
    """Bounded hand-off from shard threads to the gRPC sender; the sender drains whole batches."""

    def __init__(self, maxlen: int = OUTBOX_MAX) -> None:
        self.items: deque[Any] = deque()
        self.cond = threading.Condition(threading.Lock())
        self.maxlen = maxlen

    def put_many(self, items: list[Any], cancelled: threading.Event) -> bool:
        with self.cond:
            while len(self.items) >= self.maxlen:
                if cancelled.is_set():
                    return False
                self.cond.wait(0.5)
            if cancelled.is_set():
                return False
            self.items.extend(items)
            self.cond.notify_all()
            return True

    def put_end(self) -> None:
        """Always accepted (cancel/finish must never block)."""
        with self.cond:
            self.items.append(_END)
            self.cond.notify_all()

    def take(self, timeout: float | None) -> list[Any]:
        """All queued items ([] after `timeout` seconds with nothing queued)."""
        with self.cond:
            if not self.items:
                self.cond.wait(timeout)
                if not self.items:
                    return []
            out = list(self.items)
            self.items.clear()
            self.cond.notify_all()
            return out


class TxnTemplate:
    """A streaming transaction pre-rendered for one stream configuration.

    `packets[:-1]` are complete responses as `current_time` join parts; the last response is
    `ct.join(pre) + VGTID + ct.join(post)`. `schemas` lists the tables with ROWs (FIELD check),
    `sizes` the encoded size of each packet (transaction_chunk_size accounting).
    """

    __slots__ = ("events", "packets", "post", "pre", "schemas", "sizes")

    def __init__(self, packets: list[list[bytes]], pre: list[bytes], post: list[bytes], schemas: list[TableSchema],
                 sizes: list[int], events: list[int]) -> None:
        self.packets, self.pre, self.post = packets, pre, post
        self.schemas, self.sizes, self.events = schemas, sizes, events


def ct_parts(prefixes: list[bytes], suffix: bytes) -> list[bytes]:
    """Join parts for events `prefix + current_time + suffix`: render with `ct.join(parts)`."""
    parts: list[bytes] = []
    cur = b""
    for p in prefixes:
        parts.append(cur + b"\x0a" + wire.uvarint(len(p) + CT_LEN + len(suffix)) + p)
        cur = suffix
    parts.append(cur)
    return parts


# vstreamManager.VStream: vterrors.Wrap(err, "failed to resolve vstream parameters") of resolveParams' errors.
RESOLVE_PREFIX = "failed to resolve vstream parameters: "


def _param_error(code: int, message: str) -> VTError:
    return VTError(code, RESOLVE_PREFIX + message)


def resolve(sim: VTGateSim, vgtid: binlogdata_pb2.VGtid) -> list[SGtid]:
    """vstream_manager.resolveParams: expand empty / regex keyspaces and empty shards."""
    sgs = list(vgtid.shard_gtids)
    if not sgs:
        raise _param_error(INVALID_ARGUMENT, "vgtid must have at least one value with a starting position in ShardGtids")
    topo = sim.topo
    if len(sgs) == 1 and (sgs[0].keyspace == "" or sgs[0].keyspace.startswith("/")):
        ks_in = sgs[0].keyspace
        names = sorted(topo.keyspaces)
        if ks_in == "":
            if sgs[0].gtid != "current":
                raise _param_error(INVALID_ARGUMENT,
                                   f"for an empty keyspace, the Gtid value must be 'current': {_fmt_vgtid(vgtid)}")
            sgs = [binlogdata_pb2.ShardGtid(keyspace=k, gtid="current") for k in names]
        else:
            try:
                rx = compile_regexp(ks_in.strip("/"))
            except FilterError as e:  # vterrors.Wrapf of Go's regexp error keeps its code: Unknown
                raise _param_error(UNKNOWN, f"failed to compile regexp using {ks_in}: {e}") from None
            sgs = [binlogdata_pb2.ShardGtid(keyspace=k, gtid=sgs[0].gtid) for k in names if rx.search(k)]
    out: list[SGtid] = []
    for sg in sgs:
        if sg.shard == "":
            if sg.gtid not in ("current", ""):
                raise _param_error(INVALID_ARGUMENT, "if shards are unspecified, the Gtid value must be 'current' or "
                                                     f"empty; got: {_fmt_vgtid(vgtid)}")
            ks = topo.keyspaces.get(sg.keyspace)
            if ks is None:
                raise _param_error(INVALID_ARGUMENT, f"failed to get shards in keyspace {sg.keyspace}: "
                                                     f"keyspace {sg.keyspace} fetch error: node doesn't exist")
            out.extend(SGtid(sg.keyspace, s.name, sg.gtid, []) for s in ks.serving_shards())
        else:
            out.append(SGtid(sg.keyspace, sg.shard, sg.gtid, list(sg.table_p_ks)))
    for s in out:
        for pk in s.table_pks:
            if not pk.lastpk.fields:
                raise VTError(INVALID_ARGUMENT, f"lastpk for table {pk.table_name} has no fields defined")
    return out


def _fmt_vgtid(v: binlogdata_pb2.VGtid) -> str:
    return "shard_gtids:{" + "} shard_gtids:{".join(
        " ".join(p for p in (f'keyspace:"{s.keyspace}"' if s.keyspace else "", f'shard:"{s.shard}"' if s.shard else "",
                             f'gtid:"{s.gtid}"' if s.gtid else "") if p) for s in v.shard_gtids) + "}"


class JournalWait:
    def __init__(self, journal: binlogdata_pb2.Journal, participants: list[SGtid]) -> None:
        self.journal = journal
        self.joined: dict[int, bool] = {id(p): False for p in participants}
        self.done = threading.Event()


class VStream:
    """One client VStream call."""

    def __init__(self, sim: VTGateSim, req: Any, fault: FaultPlan | None = None) -> None:
        self.sim = sim
        self.fault = fault
        # resolveParams: only a missing Filter means every table; one without rules matches none.
        flt = req.filter if req.HasField("filter") else None
        rules = [(r.match, r.filter) for r in flt.rules] if flt is not None else [("/.*", "")]
        self.rules = Rules(rules)
        f = req.flags
        self.flags = Flags(f.heartbeat_interval, f.stop_on_reshard, f.stream_keyspace_heartbeats,
                           f.include_reshard_journal_events, list(f.tables_to_copy),
                           f.exclude_keyspace_from_table_name, f.transaction_chunk_size, f.minimize_skew)
        self.sgtids = resolve(sim, req.vgtid)
        self.lock = threading.Lock()
        self.out = Outbox()
        self.error: VTError | None = None
        self.cancelled = threading.Event()
        self.threads: list[threading.Thread] = []
        self.active = 0
        self.journals: dict[int, JournalWait] = {}
        self.copy_completed: set[tuple[str, str]] = set()
        self.events_sent = 0
        # minimize_skew (vstream_manager computeSkew/mustPause): latest event time per shard stream
        self.skew_lock = threading.Lock()
        self.timestamps: dict[str, int] = {}
        self.laggard = ""
        self.skew_fixed: threading.Event | None = None

    # -- lifecycle
    def start(self) -> None:
        for sg in list(self.sgtids):
            self._start_shard(sg)

    def _start_shard(self, sg: SGtid) -> None:
        with self.sim.streams_lock:
            self.active += 1
        t = threading.Thread(target=self._run_shard, args=(sg,), daemon=True, name=f"vstream-{sg.keyspace}/{sg.shard}")
        self.threads.append(t)
        t.start()

    def cancel(self) -> None:
        self.cancelled.set()
        for sg in self.sgtids:
            ks = self.sim.topo.keyspaces.get(sg.keyspace)
            sh = ks.shards.get(sg.shard) if ks else None
            if sh is not None:
                sh.binlog.wake()
        for jw in self.journals.values():
            jw.done.set()
        self.out.put_end()

    def fail(self, err: VTError) -> None:
        with self.lock:
            if self.error is None:
                self.error = err
        self.cancel()

    def _run_shard(self, sg: SGtid) -> None:
        try:
            ShardStream(self, sg).run()
        except VTError as e:
            self.fail(e)
        except Exception as e:  # a bug in the simulator must still end the stream loudly
            self.fail(VTError(INTERNAL, f"vtgatesim: {type(e).__name__}: {e}"))
        finally:
            with self.sim.streams_lock:
                self.active -= 1
                last = self.active == 0
            if last and not self.cancelled.is_set():
                self.out.put_end()

    def send_group(self, responses: list[bytes]) -> bool:
        """Queue a transaction's responses contiguously (the caller holds self.lock)."""
        return self.out.put_many(responses, self.cancelled) if responses else True

    def responses(self) -> Iterator[bytes]:
        """What the gRPC handler yields; raises VTError at the end on failure."""
        hb = self.flags.heartbeat_interval
        take = self.out.take
        while True:
            batch = take(hb if hb > 0 else None)
            if not batch:
                if hb <= 0:
                    continue
                now = time.time_ns()
                yield wire.event(wire.event_prefix(wire.HEARTBEAT, now // 1_000_000_000), wire.ct_field(now), b"")
                continue
            for item in batch:
                if item is _END:
                    if self.error is not None:
                        raise self.error
                    return
                yield item

    # -- minimize_skew
    def compute_skew(self, stream_id: str, ts: int) -> bool:
        """Record `stream_id`'s event time; True when that stream must pause (vtgate's MaxSkew = 2 s).

        The faster streams wait while a laggard more than 2 s behind catches up; the laggard clears
        the skew. As in Vitess, ``mustPause`` compares against a ``lowestTS`` that is never set (0),
        so every non-laggard stream pauses while a skew lasts.
        """
        with self.skew_lock:
            now = int(time.time())
            self.timestamps[stream_id] = now - (now - ts)  # vtgate: now - (current_time - timestamp)
            if len(self.timestamps) <= 1:
                return False
            laggard = min(self.timestamps, key=lambda k: self.timestamps[k])
            spread = max(self.timestamps.values()) - self.timestamps[laggard]
            if self.laggard:
                if spread <= MAX_SKEW:
                    self.laggard = ""
                    assert self.skew_fixed is not None
                    self.skew_fixed.set()
            elif spread > MAX_SKEW:
                self.laggard = laggard
                self.skew_fixed = threading.Event()
            if not self.laggard or self.laggard == stream_id or self.timestamps[stream_id] <= MAX_SKEW:
                return False
            self.sim.skew_pauses += 1
            return True

    # -- VGTID
    def vgtid_event(self, sg: SGtid, suffix: bytes) -> bytes:
        """A VGTID event with the whole stream vgtid (call under self.lock)."""
        vg = b"".join(s.enc for s in self.sgtids)
        return wire.event(wire.f_varint(1, wire.VGTID) + wire.f_msg(7, vg), b"", suffix)

    # -- journals (vstream_manager.getJournalEvent)
    def journal_event(self, sg: SGtid, journal: binlogdata_pb2.Journal) -> JournalWait | None:
        if journal.migration_type == binlogdata_pb2.TABLES:
            return None
        with self.lock:
            jw = self.journals.get(journal.id)
            if jw is None:
                mode = ""
                parts: list[SGtid] = []
                for p in journal.participants:
                    inner = next((s for s in self.sgtids if s.keyspace == p.keyspace and s.shard == p.shard), None)
                    if inner is not None:
                        if mode == "none":
                            raise self._not_all(journal)
                        mode = "all"
                        parts.append(inner)
                    else:
                        if mode == "all":
                            raise self._not_all(journal)
                        mode = "none"
                if mode == "none":
                    return None
                jw = self.journals[journal.id] = JournalWait(journal, parts)
            if id(sg) not in jw.joined:
                return None
            jw.joined[id(sg)] = True
            if not all(jw.joined.values()):
                return jw
            if not self.flags.stop_on_reshard:
                keep = [s for s in self.sgtids if id(s) not in jw.joined]
                new = [SGtid(s.keyspace, s.shard, s.gtid, []) for s in journal.shard_gtids]
                self.sgtids = keep + new
                for s in new:
                    self._start_shard(s)
            jw.done.set()
            return jw

    def _not_all(self, journal: binlogdata_pb2.Journal) -> VTError:
        parts = " ".join(f'keyspace:"{p.keyspace}" shard:"{p.shard}"' for p in journal.participants)
        stream = " ".join(f'keyspace:"{s.keyspace}" shard:"{s.shard}" gtid:"{s.gtid}"' for s in self.sgtids)
        return VTError(INTERNAL, f"not all journaling participants are in the stream: journal: [{parts}], "
                                 f"stream: [{stream}]")


class ShardStream:
    """The tablet vstreamer for one shard plus vtgate's per-shard handling."""

    def __init__(self, vs: VStream, sg: SGtid) -> None:
        self.vs = vs
        self.sg = sg
        self.sim = vs.sim
        ks = self.sim.topo.keyspaces.get(sg.keyspace)
        shard = ks.shards.get(sg.shard) if ks is not None else None
        if ks is not None and any(not s.deleted for s in ks.shards.values()):
            # vstream_manager.keyspaceHasBeenResharded runs before every tablet stream and
            # checks every shard of this keyspace in the VGTID against the topology.
            with vs.lock:
                names = [s.shard for s in vs.sgtids if s.keyspace == sg.keyspace]
            gone = next((n for n in names if n not in ks.shards or ks.shards[n].deleted), None)
            if gone is not None:
                raise VTError(FAILED_PRECONDITION, f"{self.start_error_prefix()}: failed to determine if keyspace "
                                                   f"{sg.keyspace} has been resharded: shard provided in VGTID, "
                                                   f"{gone}, not found in the {sg.keyspace} keyspace")
        if ks is None or shard is None or shard.deleted:
            raise VTError(UNAVAILABLE, f"{self.start_error_prefix()}: failed to find a PRIMARY tablet for "
                                       f"VStream in {sg.keyspace}/{sg.shard} within the {CELL} cell(s)")
        self.ks = ks
        self.shard: Shard = shard
        self.suffix = wire.ks_shard_fields(sg.keyspace, sg.shard)
        self.qualify = not vs.flags.exclude_keyspace_from_table_name
        self.fields_sent: set[int] = set()  # id(schema) with a FIELD in this vstreamer session
        self.tablet_events = 0  # events of the current tablet connection
        self.stream_id = f"{sg.keyspace}/{sg.shard}"
        fault = vs.fault
        self.tablet_failures_left = fault.tablet_failures if fault is not None else 0
        self.plans: dict[tuple[int, bool], TablePlan | None] = {}
        self.packet_size = self.sim.packet_size
        self.anonymise = bool(vs.fault and vs.fault.anonymise_columns)
        f = vs.flags
        # What a cached TxnTemplate depends on (the entry fixes keyspace, shard and schemas).
        self.tkey = (tuple(vs.rules.rules), self.qualify, f.stream_keyspace_heartbeats, self.packet_size, ks.sharded)
        self.chunk_size = f.transaction_chunk_size if not f.minimize_skew else 0

    # -- helpers
    def start_error_prefix(self) -> str:
        """How vtgate's startOneStream wraps a shard stream's error (``%+v`` of the ShardGtid)."""
        sg = self.sg
        return f"error starting stream from shard GTID keyspace:\"{sg.keyspace}\" shard:\"{sg.shard}\" gtid:\"{sg.gtid}\""

    def tname(self, table: str) -> str:
        return f"{self.sg.keyspace}.{table}" if self.qualify else table

    def plan(self, schema: TableSchema, at: str = "", copying: bool = False) -> TablePlan | None:
        """The table's plan. A filter the planbuilder refuses fails the tablet stream with its error
        (mostly code Unknown, which vtgate retries as ephemeral); the binlog vstreamer wraps it
        with the position reached (`at`: the one including the transaction being parsed).
        ``copying``: the copy phase's plan (a table name's empty filter is a ``select *`` there)."""
        key = (id(schema), copying)
        if key not in self.plans:
            try:
                self.plans[key] = self.vs.rules.plan(schema, self.ks.vindex_column(schema.name), self.ks.sharded,
                                                     copying=copying)
            except FilterError as e:
                where = f"stream (at source tablet) error @ {at.split('/', 1)[-1]}: " if at else ""
                code = INVALID_ARGUMENT if e.code == "INVALID_ARGUMENT" else UNKNOWN
                label = "InvalidArgument" if code == INVALID_ARGUMENT else "Unknown"
                raise _TabletError(code, f"vttablet: rpc error: code = {label} desc = {where}{e}") from None
        return self.plans[key]

    def simple(self, etype: int, ts: int, ct: bytes, body: bytes = b"") -> bytes:
        return wire.event(wire.event_prefix(etype, ts, body), ct, self.suffix)

    def field_prefix(self, schema: TableSchema, plan: TablePlan, ts: int, internal: bool = False) -> bytes:
        fields = plan_fields(plan, schema.fields(self.shard.database, self.anonymise))
        fe = binlogdata_pb2.FieldEvent(table_name=self.tname(schema.name), fields=fields, keyspace=self.sg.keyspace,
                                       shard=self.sg.shard, enum_set_string_values=True, is_internal_table=internal)
        return wire.event_prefix(wire.FIELD, ts, wire.f_msg(6, fe.SerializeToString()))

    def field_event(self, schema: TableSchema, plan: TablePlan, ts: int, ct: bytes, internal: bool = False) -> bytes:
        return wire.event(self.field_prefix(schema, plan, ts, internal), ct, self.suffix)

    def row_event(self, rows: bl.RowsEvent, plan: TablePlan, ts: int, ct: bytes, internal: bool) -> bytes | None:
        """Encoded ROW event for this stream (None if the filter drops every row)."""
        prefix = self.row_prefix(rows, plan, ts, internal)
        return None if prefix is None else wire.event(prefix, ct, self.suffix)

    def row_prefix(self, rows: bl.RowsEvent, plan: TablePlan, ts: int, internal: bool) -> bytes | None:
        """ROW event fields before current_time (None if the filter drops every row)."""
        if plan.passthrough:
            key = self.qualify
            prefix = rows.cache.get(key)
            if prefix is None:
                re_ = (wire.f_str(1, self.tname(rows.schema.name)) + rows.encoded_changes
                       + wire.f_str(3, self.sg.keyspace) + wire.f_str(4, self.sg.shard) + wire.f_varint(6, internal))
                prefix = rows.cache[key] = wire.f_varint(1, wire.ROW) + wire.f_varint(2, ts) + wire.f_msg(5, re_)
            return prefix
        parts = []
        schema = rows.schema
        for before, after in rows.changes:
            b = before if before is not None and row_matches(plan, schema, before) else None
            a = after if after is not None and row_matches(plan, schema, after) else None
            if b is None and a is None:
                continue
            rc = b""
            if b is not None:
                rc += wire.f_msg(1, wire.encode_row(project(plan, b)))
            if a is not None:
                rc += wire.f_msg(2, wire.encode_row(project(plan, a)))
            parts.append(wire.f_msg(2, rc))
        if not parts:
            return None
        re_ = (wire.f_str(1, self.tname(schema.name)) + b"".join(parts) + wire.f_str(3, self.sg.keyspace)
               + wire.f_str(4, self.sg.shard) + wire.f_varint(6, internal))
        return wire.event_prefix(wire.ROW, ts, wire.f_msg(5, re_))

    def emit(self, responses: list[list[bytes]], set_gtid: str | None = None,
             vgtid_at: tuple[int, int] | None = None, align_ts: int = 0) -> None:
        """Send a group of responses; a VGTID is built at `vgtid_at` (response, index) after updating the gtid.

        `align_ts` is the timestamp of the group's COMMIT/DDL/OTHER for minimize_skew (0: none).
        """
        vs = self.vs
        self.tablet_check()
        self.tablet_events += sum(len(r) for r in responses)
        self.align(align_ts)
        with vs.lock:
            if set_gtid is not None:
                self.sg.gtid = set_gtid
                self.sg.encode()
            if vgtid_at is not None:
                ri, ei = vgtid_at
                responses[ri].insert(ei, vs.vgtid_event(self.sg, self.suffix))
            out = [b"".join(r) for r in responses if r]
            fault = vs.fault
            if fault is not None:
                out = fault.apply(vs, out, [len(r) for r in responses if r])
            vs.events_sent += sum(len(r) for r in responses)
            vs.send_group(out)

    def check_cancel(self) -> None:
        if self.vs.cancelled.is_set():
            raise _Stop()

    # -- tablet faults and vtgate's retry loop (vstream_manager.streamFromTablet / shouldRetry)
    def tablet_check(self) -> None:
        """Fail this tablet connection if the stream's FaultPlan says so (before sending more)."""
        fault = self.vs.fault
        if (fault is None or fault.tablet_fail_after_events is None or self.tablet_failures_left <= 0
                or self.tablet_events < fault.tablet_fail_after_events):
            return
        self.tablet_failures_left -= 1
        raise _TabletError(fault.tablet_fail_code, fault.tablet_fail_message)

    def align(self, ts: int) -> None:
        """vtgate's alignStreams before sending a COMMIT/DDL/OTHER group (minimize_skew)."""
        vs = self.vs
        if not vs.flags.minimize_skew or ts == 0:
            return
        deadline = time.monotonic() + self.sim.skew_timeout
        while vs.compute_skew(self.stream_id, ts):
            while True:
                fixed = vs.skew_fixed
                if fixed is None or fixed.wait(0.05):
                    break
                self.check_cancel()
                if time.monotonic() >= deadline:
                    ks, sh = self.sg.keyspace, self.sg.shard
                    raise _TabletError(CANCELED, f"error aligning streams across {ks}/{sh}: timed out while waiting "
                                                 f"for skew to reduce for stream {self.stream_id} from {ks}/{sh}")

    def tablet_alias(self) -> str:
        return f"{CELL}-{self.shard.tablet_uid:010d}"

    @staticmethod
    def _retry_verdict(e: _TabletError) -> bool:
        """vstream_manager.shouldRetry: INTERNAL and INVALID_ARGUMENT (but a GTIDSet Mismatch) end the
        VStream; FAILED_PRECONDITION, UNAVAILABLE and every other code (non-SQL errors count as
        ephemeral, sqlerror.IsEphemeralError) are retried."""
        if e.code == INTERNAL:
            return False
        if e.code == INVALID_ARGUMENT:
            return "GTIDSet Mismatch" in e.message
        return True

    # -- main
    def run(self) -> None:
        """vtgate's per-shard loop: retryable tablet errors restart the tablet stream from the last
        position vtgate sent; three consecutive failures (no event in between) end the VStream."""
        err_count = 0
        while True:
            self.tablet_events = 0
            try:
                self.tablet_check()
                self._run()
                return
            except _Stop:
                return
            except _TabletError as e:
                ks, sh = self.sg.keyspace, self.sg.shard
                if not self._retry_verdict(e):
                    raise VTError(e.code, f"{self.start_error_prefix()}: error in vstream for {ks}/{sh} on tablet "
                                          f"{self.tablet_alias()}: {e.message}") from None
                if self.tablet_events:
                    err_count = 0  # "We received a valid event. Reset error count."
                err_count += 1
                if err_count >= 3:
                    raise VTError(e.code, f"{self.start_error_prefix()}: persistent error in vstream for {ks}/{sh} "
                                          f"on tablet {self.tablet_alias()}; giving up: {e.message}") from None
                self.sim.tablet_restarts += 1
                self.fields_sent.clear()  # a new tablet vstreamer sends FIELD events again

    def _run(self) -> None:
        sg = self.sg
        binlog = self.shard.binlog
        if sg.gtid == "current":
            with self.sim.topo.lock:
                pos = binlog.position
                index = len(binlog.entries)
            now = time.time_ns()
            ct = wire.ct_field(now)
            self.emit([[self.simple(wire.OTHER, now // 1_000_000_000, ct)]], set_gtid=pos, vgtid_at=(0, 0),
                      align_ts=now // 1_000_000_000)
        elif sg.gtid == "" or sg.table_pks:
            index = self.copy()
        else:
            index = self.start_index(sg.gtid)
        self.stream_from(index)

    def start_index(self, gtid: str) -> int:
        try:
            want = GtidSet.parse(gtid)
        except GtidParseError as e:
            raise VTError(INVALID_ARGUMENT, f"error decoding position {gtid}: {e}") from None
        binlog = self.shard.binlog
        have = binlog.gtid_set()
        if not have.contains(want):
            raise VTError(INVALID_ARGUMENT, f"GTIDSet Mismatch: requested source position:{gtid}, "
                                            f"current target vrep position: {have.position()}")
        return binlog.index_after(want, gtid)

    def stream_from(self, index: int, stop: int | None = None, plans: dict[str, bool] | None = None) -> int:
        """Stream binlog entries from `index` (up to `stop` for a copy's catch-up, which filters rows by
        the copy `plans`: see iter_txn_items); returns the next index."""
        binlog = self.shard.binlog
        entries = binlog.entries
        fault = self.vs.fault
        while stop is None or index < stop:
            if fault is not None and fault.lag_shards:
                fault.lag(self.vs, self.sg.shard)
            self.check_cancel()
            if not self.shard.unthrottled.is_set():
                # The tablet throttler: the vstreamer sends only heartbeats (with throttled=true),
                # which vtgate never forwards, until the throttle is lifted.
                self.shard.unthrottled.wait(0.1)
                continue
            if index >= len(entries):
                if stop is not None:
                    break
                if self.shard.deleted:
                    raise VTError(UNAVAILABLE, f"vttablet: rpc error: code = Unavailable desc = shard "
                                               f"{self.sg.keyspace}/{self.sg.shard} was deleted")
                if not binlog.wait_for(index, self.sim.tablet_heartbeat_interval) and self.vs.flags.minimize_skew:
                    # An idle tablet sends a HEARTBEAT every 0.9 s; vtgate aligns on it (never pauses).
                    self.vs.compute_skew(self.stream_id, int(time.time()))
                continue
            e = entries[index]
            index += 1
            if e.kind == bl.TXN:
                self.send_txn(e, plans)
            # A copy's catch-up (plans set) filters ROW/FIELD events only (uvstreamer.filterEvents:
            # an event without a table, DDL, OTHER and JOURNAL included, always passes).
            elif e.kind == bl.DDL:
                self.send_ddl(e)
            elif e.kind == bl.OTHER:
                now = time.time_ns()
                self.emit([[self.simple(wire.OTHER, e.timestamp, wire.ct_field(now))]], set_gtid=e.position,
                          vgtid_at=(0, 0), align_ts=e.timestamp)
            elif e.kind == bl.JOURNAL:
                self.handle_journal(e)
        return index

    def send_txn(self, e: bl.Entry, plans: dict[str, bool] | None) -> None:
        if plans is not None:
            self.send_catchup_txn(e, plans)
            return
        if isinstance(e.rows, bl.GeneratedRows):
            # Rendered while sending and never cached: a huge generated transaction stays out of memory.
            if self.vs.fault is None:
                self.emit_generated(e)
            else:
                self.emit_txn_items(e, self.txn_items(e, None))
            return
        tpl = e.cache.get(self.tkey)
        if tpl is None:
            tpl = e.cache[self.tkey] = self.txn_template(e)
        sent = self.fields_sent
        if all(id(sc) in sent for sc in tpl.schemas):
            self.emit_template(e, tpl)
            return
        # First use of a table in this vstreamer session: FIELD before its first ROW (rare; built directly).
        self.emit_txn_items(e, self.txn_items(e, None))

    def txn_items(self, e: bl.Entry, plans: dict[str, bool] | None) -> list[tuple[TableSchema, TablePlan, bytes, int]]:
        """(schema, plan, ROW prefix, row data size) for each Rows_event this stream sends."""
        return list(self.iter_txn_items(e, plans))

    def iter_txn_items(self, e: bl.Entry, plans: dict[str, bool] | None) -> Iterator[tuple[TableSchema, TablePlan, bytes, int]]:
        """(schema, plan, ROW prefix, row data size) for each Rows_event this stream sends.

        `plans` (a copy's catch-up): the tables still to copy, True once a lastpk exists. As
        uvstreamer.shouldSendEventForTable, a table in its copy phase with a lastpk gets all of its
        changes (isRowCopied is not implemented upstream: rows beyond the lastpk too), one whose
        copy has not started gets none (its copy will read the newer state), and every other table
        (copied in this stream, or not copied at all) gets all.
        """
        internal = e.database == "_vt"
        if internal and not self.vs.flags.stream_keyspace_heartbeats:
            return
        ts = e.timestamp
        for rows in e.rows:
            schema = rows.schema
            plan = TablePlan() if internal else self.plan(schema, e.position)
            if plan is None:
                continue
            if plans is not None and plans.get(schema.name) is False:
                continue
            prefix = self.row_prefix(rows, plan, ts, internal)
            if prefix is not None:
                yield schema, plan, prefix, rows.data_size

    def packets(self, e: bl.Entry, items: Iterable[tuple[TableSchema, TablePlan, bytes, int]],
                fields: bool) -> list[list[bytes]]:
        """vstreamer bufferAndTransmit: event prefixes per tablet packet (flush before an overflowing ROW)."""
        return list(self.iter_packets(e, items, fields))

    def iter_packets(self, e: bl.Entry, items: Iterable[tuple[TableSchema, TablePlan, bytes, int]],
                     fields: bool) -> Iterator[list[bytes]]:
        ts = e.timestamp
        internal = e.database == "_vt"
        cur = [wire.event_prefix(wire.BEGIN, ts)]
        size = 0
        psize = self.packet_size
        sent = self.fields_sent
        for schema, plan, prefix, dsize in items:
            if fields and id(schema) not in sent:
                sent.add(id(schema))
                cur.append(self.field_prefix(schema, plan, ts, internal))
            if size + dsize > psize and size > 0:
                yield cur
                cur = []
                size = 0
            size += dsize
            cur.append(prefix)
        yield cur

    def txn_template(self, e: bl.Entry) -> TxnTemplate:
        items = self.txn_items(e, None)
        pk = self.packets(e, items, fields=False)
        sfx = self.suffix
        packets = [ct_parts(p, sfx) for p in pk[:-1]]
        pre = ct_parts(pk[-1], sfx)
        post = ct_parts([wire.event_prefix(wire.COMMIT, e.timestamp)], sfx)
        sizes = [sum(len(x) for x in p) + CT_LEN * (len(p) - 1) for p in packets]
        sizes.append(sum(len(x) for x in pre) + sum(len(x) for x in post) + CT_LEN * (len(pre) + len(post) - 2))
        events = [len(p) for p in pk]
        events[-1] += 2  # VGTID, COMMIT
        schemas: list[TableSchema] = []
        for schema, _plan, _prefix, _size in items:
            if schema not in schemas:
                schemas.append(schema)
        return TxnTemplate(packets, pre, post, schemas, sizes, events)

    def emit_template(self, e: bl.Entry, tpl: TxnTemplate) -> None:
        """Send a cached transaction: render current_time and the stream VGTID into it."""
        vs = self.vs
        self.tablet_check()
        self.tablet_events += sum(tpl.events)
        self.align(e.timestamp)
        ct = wire.ct_field(time.time_ns())
        join = ct.join
        with vs.lock:
            self.sg.set_gtid(e.position, e.encoded_position)
            last = join(tpl.pre) + vs.vgtid_event(self.sg, self.suffix) + join(tpl.post)
            if len(tpl.packets) == 0:
                out = [last]
            else:
                out = [join(p) for p in tpl.packets]
                out.append(last)
            self._send_txn_locked(out, tpl.sizes, tpl.events)

    def emit_txn_items(self, e: bl.Entry, items: list[tuple[TableSchema, TablePlan, bytes, int]]) -> None:
        pk = self.packets(e, items, fields=True)
        sfx = self.suffix
        vs = self.vs
        self.tablet_check()
        self.tablet_events += sum(len(p) for p in pk) + 2
        self.align(e.timestamp)
        ct = wire.ct_field(time.time_ns())
        with vs.lock:
            self.sg.set_gtid(e.position, e.encoded_position)
            out = [ct.join(ct_parts(p, sfx)) for p in pk[:-1]]
            out.append(ct.join(ct_parts(pk[-1], sfx)) + vs.vgtid_event(self.sg, sfx)
                       + ct.join(ct_parts([wire.event_prefix(wire.COMMIT, e.timestamp)], sfx)))
            events = [len(p) for p in pk]
            events[-1] += 2
            self._send_txn_locked(out, [len(r) for r in out], events)

    def emit_generated(self, e: bl.Entry) -> None:
        """emit_txn_items for a GeneratedRows entry: each packet is rendered and queued as it fills.

        The responses are emit_txn_items' (same packets, one current_time, VGTID + COMMIT in the
        last); the stream lock is held until COMMIT, so no other shard's response comes between.
        Queueing per packet bounds memory by the outbox (vtgate holds such a transaction whole
        unless transaction_chunk_size is set; the client cannot tell the difference).
        """
        vs = self.vs
        sfx = self.suffix
        self.tablet_check()
        self.align(e.timestamp)
        ct = wire.ct_field(time.time_ns())
        with vs.lock:
            self.sg.set_gtid(e.position, e.encoded_position)
            prev: list[bytes] | None = None
            for p in self.iter_packets(e, self.iter_txn_items(e, None), fields=True):
                if prev is not None and not self._send_packet_locked(ct.join(ct_parts(prev, sfx)), len(prev)):
                    return
                prev = p
            assert prev is not None  # iter_packets always yields the BEGIN packet
            last = (ct.join(ct_parts(prev, sfx)) + vs.vgtid_event(self.sg, sfx)
                    + ct.join(ct_parts([wire.event_prefix(wire.COMMIT, e.timestamp)], sfx)))
            self._send_packet_locked(last, len(prev) + 2)

    def _send_packet_locked(self, response: bytes, events: int) -> bool:
        self.tablet_events += events
        self.vs.events_sent += events
        return self.vs.send_group([response])

    def _send_txn_locked(self, out: list[bytes], sizes: list[int], events: list[int]) -> None:
        """Queue one transaction's responses (caller holds vs.lock, so shards never interleave).

        With `transaction_chunk_size` (v24) vtgate sends the packets buffered so far as soon as the
        transaction exceeds that size and then forwards each later packet as it arrives, holding the
        stream lock until COMMIT; otherwise it buffers the whole transaction and sends it at COMMIT.
        Faults therefore see one group per transaction, or one per packet once chunking has kicked in.
        """
        vs = self.vs
        fault = vs.fault
        chunk = self.chunk_size
        if chunk > 0 and len(out) > 1:
            acc = 0
            for i, n in enumerate(sizes):
                acc += n
                if acc > chunk and i < len(out) - 1:
                    # packets 0..i went out together when the threshold was crossed, then one by one
                    groups = [(out[:i + 1], sum(events[:i + 1]))]
                    groups += [([r], k) for r, k in zip(out[i + 1:], events[i + 1:], strict=True)]
                    for rs, k in groups:
                        if fault is not None:
                            rs = fault.apply(vs, rs, [])
                        vs.events_sent += k
                        if not vs.send_group(rs):
                            return
                    return
        if fault is not None:
            out = fault.apply(vs, out, events)
        vs.events_sent += sum(events)
        vs.send_group(out)

    def send_catchup_txn(self, e: bl.Entry, plans: dict[str, bool]) -> None:
        """Catch-up during the copy phase: the rows uvstreamer.filterEvents lets through (iter_txn_items)."""
        self.emit_txn_items(e, self.txn_items(e, plans))

    def send_ddl(self, e: bl.Entry) -> None:
        now = time.time_ns()
        ct = wire.ct_field(now)
        schema_match = self.vs.rules.matches(e.ddl_table) and e.database == self.shard.database
        if schema_match:
            ev = self.simple(wire.DDL, e.timestamp, ct, wire.f_str(4, e.statement))
        else:
            ev = self.simple(wire.OTHER, e.timestamp, ct)
        self.emit([[ev]], set_gtid=e.position, vgtid_at=(0, 0), align_ts=e.timestamp)

    def handle_journal(self, e: bl.Entry) -> None:
        vs = self.vs
        journal: binlogdata_pb2.Journal = e.journal
        if (vs.flags.include_reshard_journal_events or vs.flags.stop_on_reshard) and \
                journal.migration_type == binlogdata_pb2.SHARDS:
            now = time.time_ns()
            ct = wire.ct_field(now)
            resp = [self.simple(wire.BEGIN, e.timestamp, ct),
                    self.simple(wire.JOURNAL, e.timestamp, ct, wire.f_msg(8, journal.SerializeToString())),
                    self.simple(wire.COMMIT, e.timestamp, ct)]
            self.emit([resp], set_gtid=e.position, vgtid_at=(0, 2))
        jw = vs.journal_event(self.sg, journal)
        if jw is None:
            return
        start = time.monotonic()
        while not jw.done.wait(0.5):
            self.check_cancel()
        if vs.flags.stop_on_reshard:
            left = STOP_ON_RESHARD_DELAY - (time.monotonic() - start)
            if left > 0:
                vs.cancelled.wait(left)
        raise _Stop()

    # -- copy phase (uvstreamer)
    def copy(self) -> int:
        """uvstreamer.copy: copy the tables one by one in name order, each after a catch-up.

        As buildTablePlan, every table the copy covers (the filter's, restricted to
        `tables_to_copy`) is planned: a table in `table_p_ks` resumes after its lastpk, every other
        one is copied from the start, also one a previous stream had copied completely (VTGate
        keeps no trace of a finished table). Before each table the catch-up replays the binlog
        from the stream's position to the new snapshot, filtered by the plans (iter_txn_items).
        """
        sg = self.sg
        topo = self.sim.topo
        store = self.shard.store
        binlog = self.shard.binlog
        inpks = {pk.table_name: pk for pk in sg.table_pks}
        with topo.lock:
            tables = sorted((t for t in store.tables.values() if self.plan(t, copying=True) is not None),
                            key=lambda t: t.name)
        if self.vs.flags.tables_to_copy:
            wanted = set(self.vs.flags.tables_to_copy)
            tables = [t for t in tables if t.name in wanted]
        if not sg.gtid and not inpks:
            missing = self.vs.rules.missing_tables({t for t in store.tables}) if store.tables else []
            if missing:  # uvstreamer.buildTablePlan: a named table must exist (if the shard has any)
                raise _TabletError(UNKNOWN, "vttablet: rpc error: code = Unknown desc = "
                                   f"table {missing[0]} is not present in the database")
            if not tables:  # uvstreamer.init
                raise _TabletError(UNKNOWN, "vttablet: rpc error: code = Unknown desc = "
                                   "stream needs a position or a table to copy")
        # table -> its copy has a lastpk; a table leaves the plans when its copy completes
        plans = {t.name: t.name in inpks for t in tables}
        index = self.start_index(sg.gtid) if sg.gtid else None
        for t0 in tables:
            self.check_cancel()
            lastpk: tuple[Any, ...] | None = None
            if t0.name in inpks:
                row = inpks[t0.name].lastpk.rows[0]
                raw = wire.row_values(row.lengths, row.values)
                cts = [t0.column(c).ct for c in t0.copy_key]
                if len(raw) != len(cts):
                    raise VTError(INVALID_ARGUMENT, f"lastpk for table {t0.name} does not match its primary key")
                lastpk = tuple(_stored(ct, v) for ct, v in zip(cts, raw, strict=True))
            with topo.lock:
                schema = store.table(t0.name)
                if schema is None:
                    plans.pop(t0.name, None)
                    continue
                rows = store.rows_after(schema, lastpk)
                snap_pos = binlog.position
                snap_index = len(binlog.entries)
            plan = self.plan(schema, copying=True)
            assert plan is not None
            if index is not None and snap_index > index:
                # catch-up / fast-forward over what happened since the last snapshot, by a new
                # vstreamer (upstream): FIELD again before each table's first ROW
                self.fields_sent.clear()
                self.stream_from(index, stop=snap_index, plans=plans)
                now = time.time_ns()
                ct = wire.ct_field(now)
                self.emit([[self.simple(wire.BEGIN, 0, ct), self.simple(wire.COMMIT, 0, ct)]],
                          set_gtid=snap_pos, vgtid_at=(0, 1))
            index = snap_index
            self.copy_table(schema, plan, rows, snap_pos, plans)
        ev = wire.event(wire.f_varint(1, wire.COPY_COMPLETED), b"", self.suffix)
        vs = self.vs
        with vs.lock:
            vs.copy_completed.add((sg.keyspace, sg.shard))
            resp = [ev]
            if all((s.keyspace, s.shard) in vs.copy_completed for s in vs.sgtids):
                resp.append(wire.event(wire.f_varint(1, wire.COPY_COMPLETED), b"", b""))
            vs.send_group([b"".join(resp)])
        self.fields_sent.clear()  # the streaming vstreamer starts fresh
        return index if index is not None else len(binlog.entries)

    def copy_table(self, schema: TableSchema, plan: TablePlan, rows: list[tuple[Any, ...]], snap_pos: str,
                   plans: dict[str, bool]) -> None:
        from .executor import image_text

        ct = wire.ct_field(time.time_ns())
        pk_fields = schema.pk_fields(self.shard.database)
        # The table's [BEGIN, FIELD] and snapshot [VGTID] reach vtgate before its first batch, but
        # vtgate sends a shard's events at COMMIT: they go out with that batch (or the "done"
        # transaction of an empty table), never with another shard's transaction in between.
        head: list[bytes] | None = [self.simple(wire.BEGIN, 0, ct), self.field_event(schema, plan, 0, ct)]
        batch: list[bytes] = []
        size = 0
        last_img: bl.Image | None = None

        def flush() -> None:
            nonlocal batch, size, head
            if not batch or last_img is None:
                return
            pk_row = query_pb2.Row()
            vals = [last_img[i] for i in schema.copy_key_indexes]
            pk_row.lengths.extend(-1 if v is None else len(v) for v in vals)
            pk_row.values = b"".join(v for v in vals if v is not None)
            tpk = binlogdata_pb2.TableLastPK(table_name=schema.name,
                                            lastpk=query_pb2.QueryResult(fields=pk_fields, rows=[pk_row]))
            c = wire.ct_field(time.time_ns())
            resp = [*batch, self.simple(wire.COMMIT, 0, c)]
            self._send_copy([resp] if head is not None else [[self.simple(wire.BEGIN, 0, c)], resp],
                            head, snap_pos, schema.name, tpk)
            plans[schema.name] = True
            head = None
            batch = []
            size = 0

        for r in rows:
            self.check_cancel()
            img = image_text(schema, r)
            assert img is not None
            if not row_matches(plan, schema, img):
                continue
            n = sum(len(v) for v in img if v is not None)
            if size + n > self.packet_size and batch:
                flush()
            rc = wire.f_msg(2, wire.f_msg(2, wire.encode_row(project(plan, img))))
            re_ = (wire.f_str(1, self.tname(schema.name)) + rc + wire.f_str(3, self.sg.keyspace)
                   + wire.f_str(4, self.sg.shard))
            batch.append(self.simple(wire.ROW, 0, ct, wire.f_msg(5, re_)))
            size += n
            last_img = img
        flush()
        # table done: LASTPK{completed} -> the table leaves table_p_ks
        c = wire.ct_field(time.time_ns())
        self._send_copy([[self.simple(wire.BEGIN, 0, c), self.simple(wire.COMMIT, 0, c)]], head, snap_pos,
                        schema.name, None)
        plans.pop(schema.name, None)

    def _send_copy(self, groups: list[list[bytes]], head: list[bytes] | None, snap_pos: str, table: str,
                   lastpk: binlogdata_pb2.TableLastPK | None) -> None:
        """Send one copy transaction as vtgate's sendAll does: `table`'s entry in this shard's
        table_p_ks becomes `lastpk` (None: removed) under the stream lock that queues the responses,
        with a VGTID before the last group's COMMIT. No other shard's VGTID can show the progress
        before these rows are sent. `head` ([BEGIN, FIELD] of the table) goes first, followed by a
        VGTID at the snapshot position `snap_pos` unless the stream is at it already (a table after
        another with no write between their snapshots: measured on Vitess v24, docs/fidelity.md)."""
        vs = self.vs
        sg = self.sg
        self.tablet_check()
        self.tablet_events += sum(len(r) for r in groups) + (len(head) if head is not None else 0)
        with vs.lock:
            out: list[list[bytes]] = []
            if head is not None:
                out.append(head)
                if sg.gtid != snap_pos:  # uvstreamer.setPosition sends no GTID for the position it is at
                    sg.gtid = snap_pos
                    sg.encode()
                    out.append([vs.vgtid_event(sg, self.suffix)])
            sg.table_pks = [p for p in sg.table_pks if p.table_name != table] + ([lastpk] if lastpk is not None else [])
            sg.encode()
            last = groups[-1]
            last.insert(len(last) - 1, vs.vgtid_event(sg, self.suffix))
            out += groups
            counts = [len(r) for r in out]
            responses = [b"".join(r) for r in out]
            if vs.fault is not None:
                responses = vs.fault.apply(vs, responses, counts)
            vs.events_sent += sum(counts)
            vs.send_group(responses)


def _stored(ct: Any, v: bytes | None) -> Any:
    """A lastpk value (MySQL text) as the SQLite store keeps it, for the `WHERE pk > ?` snapshot read."""
    if v is None:
        return None
    if ct.kind in ("binary", "varbinary", "blob"):
        return mysqltypes.normalize(ct, v)
    if ct.kind == "bit":
        return int.from_bytes(v, "big")
    return mysqltypes.normalize(ct, v.decode(ct.codec if ct.codec != "binary" else "latin-1"))


class _TabletError(Exception):
    """A tablet VStream ended with an error; vtgate decides whether to retry."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Stop(Exception):
    pass
