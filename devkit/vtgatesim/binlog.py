"""Per-shard binlog: committed transactions with GTIDs, row images in MySQL text form.

Each entry records the full executed GTID set after it (the position a client resumes from).
Readers block on a condition until new entries arrive; nothing polls.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .gtid import GtidSet, format_runs
from .schema import TableSchema

TXN, DDL, OTHER, JOURNAL = 1, 2, 3, 4
ROWS_EVENT_MAX = 8192  # binlog_row_event_max_size: MySQL splits big statements into several Rows_events

Image = tuple[bytes | None, ...]


@dataclass(slots=True)
class RowsEvent:
    """One binlog Rows_event: one table, one or more row changes (before/after text images)."""

    schema: TableSchema
    version: int
    changes: Sequence[tuple[Image | None, Image | None]]
    data_size: int  # bytes of row values, as the vstreamer counts them for packet splitting
    encoded_changes: bytes  # RowEvent.row_changes fields, pre-encoded
    cache: dict[Any, bytes] = field(default_factory=dict)


class GeneratedRows:
    """A transaction's Rows_events rendered on demand by a deterministic factory, never held whole.

    For very large generated transactions (a 1,000,000-row insert): each reader iterates it again
    and gets the same events, so memory stays bounded by one Rows_event. The factory must be pure
    (same events every call) and capture the schema object of the commit.
    """

    __slots__ = ("factory", "row_count")

    def __init__(self, factory: Callable[[], Iterator[RowsEvent]], row_count: int) -> None:
        self.factory, self.row_count = factory, row_count

    def __iter__(self) -> Iterator[RowsEvent]:
        return self.factory()


def spill(events: Iterable[RowsEvent]) -> GeneratedRows:
    """Rendered Rows_events kept in an unlinked temporary file instead of memory.

    Each reader gets the same events back (`os.pread`, so concurrent streams do not share a file
    position); their row images are decoded from the encoding only when a stream needs them
    (filters, copy catch-up). The file goes when the entry does (or the process ends).
    """
    fh = tempfile.TemporaryFile(prefix="vtgatesim-txn-")  # noqa: SIM115 - lives as long as the entry
    index: list[tuple[RowsEvent, int, int]] = []  # (event without changes, offset, length)
    offset = rows = 0
    for ev in events:
        fh.write(ev.encoded_changes)
        index.append((RowsEvent(ev.schema, ev.version, (), ev.data_size, b""), offset, len(ev.encoded_changes)))
        offset += len(ev.encoded_changes)
        rows += len(ev.changes)
    fh.flush()

    def read() -> Iterator[RowsEvent]:
        for head, off, n in index:
            data = os.pread(fh.fileno(), n, off)
            yield RowsEvent(head.schema, head.version, _DecodedChanges(data), head.data_size, data)

    return GeneratedRows(read, rows)


class _DecodedChanges(Sequence[tuple[Image | None, Image | None]]):
    """A spilled Rows_event's (before, after) images, decoded from its encoding on first use."""

    __slots__ = ("_encoded", "_list")

    def __init__(self, encoded: bytes) -> None:
        self._encoded = encoded
        self._list: list[tuple[Image | None, Image | None]] | None = None

    def _get(self) -> list[tuple[Image | None, Image | None]]:
        if self._list is None:
            from vitessapi import binlogdata_pb2

            re_ = binlogdata_pb2.RowEvent.FromString(self._encoded)
            self._list = [(_image(rc.before) if rc.HasField("before") else None,
                           _image(rc.after) if rc.HasField("after") else None) for rc in re_.row_changes]
        return self._list

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, i: Any) -> Any:
        return self._get()[i]

    def __iter__(self) -> Iterator[tuple[Image | None, Image | None]]:
        return iter(self._get())


def _image(row: Any) -> Image:
    """query.Row (lengths, concatenated values) -> image; length -1 is NULL."""
    out: list[bytes | None] = []
    pos = 0
    values = row.values
    for n in row.lengths:
        if n < 0:
            out.append(None)
        else:
            out.append(values[pos:pos + n])
            pos += n
    return tuple(out)


@dataclass(slots=True)
class Entry:
    kind: int
    sid: str
    seq: int
    position: str
    timestamp: int
    rows: list[RowsEvent] | GeneratedRows = field(default_factory=list)
    statement: str = ""
    ddl_table: str = ""
    database: str = ""  # schema of the statement (ks db, or `_vt` for sidecar rows)
    journal: Any = None  # binlogdata_pb2.Journal
    encoded_position: bytes = b""
    cache: dict[Any, Any] = field(default_factory=dict)  # rendered transaction per stream configuration


def make_rows_events(schema: TableSchema, changes: list[tuple[Image | None, Image | None]]) -> list[RowsEvent]:
    """Group row changes of one statement into Rows_events of at most ROWS_EVENT_MAX bytes."""
    return list(iter_rows_events(schema, changes))


def iter_rows_events(schema: TableSchema, changes: Iterable[tuple[Image | None, Image | None]]) -> Iterator[RowsEvent]:
    """make_rows_events as a generator: each Rows_event as soon as it is full (GeneratedRows)."""
    cur: list[tuple[Image | None, Image | None]] = []
    parts: list[bytes] = []
    size = 0
    for before, after in changes:
        rc = b""
        n = 0
        if before is not None:
            rc += wire.f_msg(1, wire.encode_row(before))
            n += sum(len(v) for v in before if v is not None)
        if after is not None:
            rc += wire.f_msg(2, wire.encode_row(after))
            n += sum(len(v) for v in after if v is not None)
        if cur and size + n > ROWS_EVENT_MAX:
            yield RowsEvent(schema, schema.version, cur, size, b"".join(parts))
            cur, parts, size = [], [], 0
        cur.append((before, after))
        parts.append(wire.f_msg(2, rc))
        size += n
    if cur:
        yield RowsEvent(schema, schema.version, cur, size, b"".join(parts))


class Binlog:
    """Append-only list of entries plus the primary's executed GTID set."""

    def __init__(self, server_uuid: str) -> None:
        self.server_uuid = server_uuid
        self.runs: dict[str, int] = {}
        self.entries: list[Entry] = []
        self.cond = threading.Condition()
        self._pos_index: dict[str, int] = {}
        self.closed = False  # set when the shard is deleted

    @property
    def position(self) -> str:
        with self.cond:
            return format_runs(self.runs)

    def gtid_set(self) -> GtidSet:
        with self.cond:
            return GtidSet.runs(dict(self.runs))

    def append(self, kind: int, timestamp: int, **kw: Any) -> Entry:
        """Commit one transaction: assign the next GTID of the current primary and wake readers."""
        with self.cond:
            sid = self.server_uuid
            seq = self.runs.get(sid, 0) + 1
            self.runs[sid] = seq
            pos = format_runs(self.runs)
            e = Entry(kind=kind, sid=sid, seq=seq, position=pos, timestamp=timestamp, **kw)
            e.encoded_position = pos.encode()
            self._pos_index[pos] = len(self.entries)
            self.entries.append(e)
            self.cond.notify_all()
            return e

    def reparent(self, new_uuid: str) -> None:
        with self.cond:
            self.server_uuid = new_uuid

    def index_after(self, pos: GtidSet, text: str) -> int:
        """Index of the first entry not contained in `pos` (where a stream from `pos` starts)."""
        with self.cond:
            i = self._pos_index.get(text.split("/", 1)[-1] and text)
            if i is not None:
                return i + 1
            entries = list(self.entries)
        for i, e in enumerate(entries):
            if not pos.contains_gtid(e.sid, e.seq):
                return i
        return len(entries)

    def wait_for(self, index: int, timeout: float | None) -> bool:
        """Block until entry `index` exists (True) or the timeout passes / the binlog closes (False)."""
        with self.cond:
            if len(self.entries) > index:
                return True
            if self.closed:
                return False
            self.cond.wait(timeout)
            return len(self.entries) > index

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()
