"""Transaction epochs per shard, as Debezium's ``VitessEpochProvider`` / ``ShardEpochMap`` / ``ShardLineage``.

At every BEGIN the whole map is recomputed from the previous transaction's VGTID and this one's:

* a shard present in both VGTIDs keeps its epoch while its GTID moves forward within the same hosts
  (the new uuid set is a superset of the old one); a shrunk or different host set (reparent to a
  replica that lacks some history, a restore, ...) adds 1. An override (``current`` or ``""``) that
  becomes a real GTID adds 1, so a start from ``current`` or a snapshot gives epoch 1. Two overrides
  keep the epoch; a real GTID followed by an override is an error.
* a shard absent from the previous VGTID (a reshard target) starts at 0, or with ``inherit`` at the
  highest epoch among the overlapping key ranges of the old map plus 1 (``vitess.inherit.epoch``).
* shards missing from the new VGTID are dropped from the map.

The map is stored in the offset as ``transaction_epoch``: a JSON string with sorted keys, e.g.
``{"-80":0,"80-":1}``, next to ``connector_generation``. A restored map whose generation differs from
the configured ``vitess.connector.generation`` gets every epoch incremented by 1.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from cdcworker.jsontypes import JsonMapping, JsonValue
from cdcworker.keyrange import parse_shard
from cdcworker.offsets.vgtid import CURRENT_GTID, EMPTY_GTID, Vgtid
from cdcworker.txmeta.rank import parse_gtid, simple_gtid

__all__ = [
    "CONNECTOR_GENERATION_KEY",
    "TRANSACTION_EPOCH_KEY",
    "EpochError",
    "EpochProvider",
    "ShardEpochMap",
    "epoch_for_gtid",
    "inherited_epoch",
    "is_override",
    "next_epoch_map",
    "unrankable",
]

TRANSACTION_EPOCH_KEY = "transaction_epoch"
CONNECTOR_GENERATION_KEY = "connector_generation"


class EpochError(ValueError):
    """An epoch cannot be determined (Debezium throws a ``DebeziumException`` in the same cases)."""


class ShardEpochMap(Mapping[str, int]):
    """An immutable shard → epoch map; iteration and JSON follow Java's ``TreeMap`` (sorted keys)."""

    __slots__ = ("_epochs", "_json")

    def __init__(self, epochs: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = epochs.items() if isinstance(epochs, Mapping) else epochs
        self._epochs: dict[str, int] = dict(sorted((str(k), int(v)) for k, v in items))
        self._json: str | None = None

    def __getitem__(self, shard: str) -> int:
        return self._epochs[shard]

    @property
    def by_shard(self) -> dict[str, int]:
        """The map's own dict (do not mutate): a plain lookup per shard on the per-transaction path."""
        return self._epochs

    def __iter__(self) -> Iterator[str]:
        return iter(self._epochs)

    def __len__(self) -> int:
        return len(self._epochs)

    def __repr__(self) -> str:
        return f"ShardEpochMap({self.to_json()})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardEpochMap):
            return self._epochs == other._epochs
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._epochs.items()))

    def to_json(self) -> str:
        """Jackson's ``writeValueAsString`` of the ``TreeMap``: compact, keys sorted (cached: the
        map is immutable and stored with every commit point)."""
        text = self._json
        if text is None:
            text = self._json = json.dumps(self._epochs, separators=(",", ":"), ensure_ascii=False)
        return text

    @classmethod
    def from_json(cls, text: str) -> ShardEpochMap:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EpochError(f"Cannot read shard epoch map: {text!r}") from exc
        if not isinstance(data, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in data.values()
        ):
            raise EpochError(f"Cannot read shard epoch map: {text!r}")
        return cls(data)

    def incremented(self, by: int = 1) -> ShardEpochMap:
        """Every epoch plus ``by`` (a connector generation change)."""
        return ShardEpochMap({k: v + by for k, v in self._epochs.items()})


def is_override(gtid: str) -> bool:
    """``current`` and ``""`` are start requests, not positions."""
    return gtid in (CURRENT_GTID, EMPTY_GTID)


def epoch_for_gtid(previous_epoch: int, previous_gtid: str, gtid: str) -> int:
    """The epoch of a shard that is in both the previous and the current VGTID."""
    prev_override, cur_override = is_override(previous_gtid), is_override(gtid)
    if prev_override and cur_override:
        return previous_epoch  # still waiting for the first transaction
    if prev_override:
        return previous_epoch + 1  # first real position after a start request
    if cur_override:
        raise EpochError(
            f"Current GTID cannot be override value if previous is standard: GTID: {gtid}, "
            f"previous GTID: {previous_gtid}, previous Epoch: {previous_epoch}"
        )
    try:
        hosts, previous_hosts = _hosts(gtid), _hosts(previous_gtid)
    except ValueError as exc:
        raise unrankable(exc, gtid) from exc
    return previous_epoch if hosts >= previous_hosts else previous_epoch + 1


def unrankable(exc: ValueError, gtid: str) -> EpochError:
    """Debezium's message, and for a MariaDB GTID (``MariaDB/<domain>-<server>-<seq>``, no ``:``)
    what to change: its ``Gtid`` parser reads MySQL56 GTID sets only and fails the task the same
    way (docs/conformance.md, "On real Vitess")."""
    if not gtid.startswith("MariaDB/"):
        return EpochError(str(exc))
    return EpochError(f"{exc}: transaction.metadata.factory=VitessOrderedTransactionMetadataFactory ranks MySQL56 GTID "
                      "sets only (as Debezium's does) and this source has MariaDB GTIDs; use the default "
                      "transaction.metadata.factory")


def _hosts(gtid: str) -> frozenset[str]:
    """The uuid set of a GTID set; an empty set (``MySQL56/``: a shard that has executed nothing,
    e.g. a fresh reshard target) has no hosts. Debezium's parser fails on it and stops the task;
    we read it as the empty history it is, so the shard's first transaction keeps its epoch."""
    flavor_end = gtid.find("/")
    if gtid[flavor_end + 1 :] == "":
        return frozenset()
    return parse_gtid(gtid).hosts


_SEQUENCES = re.compile(r":[^,]*")


@functools.lru_cache(maxsize=256)
def _host_list(gtid: str) -> str:
    """A GTID set without its sequence numbers: ``MySQL56/u1:1-5,u2:7`` -> ``MySQL56/u1,u2``."""
    return _SEQUENCES.sub("", gtid)


def _same_hosts(previous_gtid: str, gtid: str) -> bool:
    """Both real GTIDs that parse, with the same hosts in the same order: ``epoch_for_gtid``
    keeps the epoch. False means "compute it" (which also raises what Debezium raises)."""
    new = simple_gtid(gtid)
    if new is not None:  # the common single-host form: no parse needed
        old = simple_gtid(previous_gtid)
        if old is not None:
            return old[0] == new[0]
    if is_override(previous_gtid) or is_override(gtid) or _host_list(previous_gtid) != _host_list(gtid):
        return False
    try:
        parse_gtid(gtid)  # cached, and needed for the rank anyway
        parse_gtid(previous_gtid)
    except ValueError:
        return False
    return True


def inherited_epoch(shard: str, epochs: Mapping[str, int]) -> int:
    """``ShardLineage``: 1 + the highest epoch among the key ranges overlapping ``shard`` (0 if none)."""
    try:
        target = parse_shard(shard)
        best = -1
        for name, epoch in epochs.items():
            # The unnamed shard of a start from "current" (features.epoch_start) is the whole key range
            # to ShardLineage ("".split("-") has no bounds), so it is every new shard's parent: a fresh
            # start with vitess.inherit.epoch gives epoch 1, as Debezium 3.5 writes.
            if target.overlaps(parse_shard(name or "-")):
                best = max(best, epoch)
    except ValueError as exc:
        raise EpochError(f"Invalid shard range: {exc}") from exc
    return best + 1


def next_epoch_map(
    epochs: Mapping[str, int], previous: Vgtid, current: Vgtid, inherit: bool
) -> ShardEpochMap:
    """The map that replaces ``epochs`` when the stream moves from ``previous`` to ``current``."""
    out: dict[str, int] = {}
    for sg in current:
        prev = previous.get(sg.shard)
        if prev is not None and prev.gtid == sg.gtid and sg.shard in epochs:
            out[sg.shard] = epochs[sg.shard]  # no move on this shard (most shards, most of the time)
        elif prev is not None:
            previous_epoch = epochs.get(sg.shard)
            if previous_epoch is None:
                raise EpochError(
                    f"Previous epoch cannot be null for shard {sg.shard} when shard present in "
                    f"previous vgtid {previous}"
                )
            out[sg.shard] = epoch_for_gtid(previous_epoch, prev.gtid, sg.gtid)
        else:
            # A reshard target seen for the first time.
            out[sg.shard] = inherited_epoch(sg.shard, epochs) if inherit else 0
    if isinstance(epochs, ShardEpochMap) and len(out) == len(epochs) and all(epochs.get(k) == v for k, v in out.items()):
        return epochs  # unchanged: keep the object (and its cached JSON)
    return ShardEpochMap(out)


def _as_vgtid(v: Vgtid | str) -> Vgtid:
    return v if isinstance(v, Vgtid) else Vgtid.from_json(v)


class EpochProvider:
    """Epoch state of one task: the map plus the VGTID of the previous transaction."""

    __slots__ = ("_previous", "epochs", "inherit")

    def __init__(
        self, epochs: ShardEpochMap, previous_vgtid: Vgtid | str | None, inherit: bool = False
    ) -> None:
        self.epochs = epochs
        self.inherit = inherit
        self._previous = None if previous_vgtid is None else _as_vgtid(previous_vgtid)

    @property
    def previous_vgtid(self) -> Vgtid | None:
        return self._previous

    def epoch(self, shard: str, vgtid: Vgtid | str) -> int:
        """At a BEGIN: recompute the map for the transaction's VGTID and return ``shard``'s epoch."""
        if self._previous is None:
            raise EpochError(f"Previous vgtid string cannot be null shard {shard} current {vgtid}")
        current = vgtid if type(vgtid) is Vgtid else _as_vgtid(vgtid)
        if not self._unchanged(self._previous, current):
            self.epochs = next_epoch_map(self.epochs, self._previous, current, self.inherit)
        self._previous = current
        try:
            return self.epochs.by_shard[shard]
        except KeyError:
            raise EpochError(f"shard {shard!r} is not in the transaction VGTID {current}") from None

    def begin_natively(
        self, tx_begin: Callable[..., Any], shape: tuple[Any, ...], id_json: bytes, ts_ms: int, current: Vgtid, shard: str  # Any: the C extension's begin function and its argument shape (cdcworker._rowenc, no stubs)
    ) -> Any:  # Any: the C extension's begin function and its argument shape (cdcworker._rowenc, no stubs)
        """``_rowenc.tx_begin``'s result for a transaction at ``current`` when the map stays as it
        is (then ``current`` becomes the previous VGTID, as ``epoch`` does), else None: the
        Python path decides."""
        previous = self._previous
        if previous is None:
            return None
        out = tx_begin(shape, id_json, ts_ms, previous.shard_gtids, current.shard_gtids, shard, self.epochs.by_shard)
        if out is not None:
            self._previous = current
        return out

    def _unchanged(self, previous: Vgtid, current: Vgtid) -> bool:
        """The map stays as it is: the same shards, in the same order, as the map and the previous
        VGTID, each GTID unchanged or moved on the same hosts (nearly every transaction). Checked
        on the GTID texts with the sequence numbers taken out, so the map is recomputed only when
        the shard set or a host set changes; ``next_epoch_map`` would return the same map."""
        shards = self.epochs.by_shard  # the map's own dict: a plain lookup per shard
        old_sgs, new_sgs = previous.shard_gtids, current.shard_gtids
        if len(old_sgs) != len(new_sgs) or len(shards) != len(new_sgs):
            return False
        for old, new in zip(old_sgs, new_sgs, strict=True):
            if new.shard not in shards:
                return False
            if old is new:  # the stream's VGTIDs share the entries of shards that did not move
                continue
            if old.shard != new.shard or (old.gtid != new.gtid and not _same_hosts(old.gtid, new.gtid)):
                return False
        return True

    @classmethod
    def restore(
        cls,
        stored: JsonMapping | None,
        start_vgtid: Vgtid | str,
        *,
        connector_generation: int = 0,
        initial_epochs: Mapping[str, int] | None = None,
        inherit: bool = False,
    ) -> EpochProvider:
        """The provider a task starts with.

        ``stored`` is the task's offset fields (or None); ``start_vgtid`` the VGTID the stream starts
        from. The previous VGTID is the stored ``transaction_id`` (Debezium's choice) or else the start
        VGTID. Without a stored map the epochs are ``initial_epochs`` (``vitess.shard.epoch.map``),
        0 for any other shard of the previous VGTID.
        """
        start = _as_vgtid(start_vgtid)
        previous: Vgtid = start
        text = stored.get(TRANSACTION_EPOCH_KEY) if stored else None
        tx_id = stored.get("transaction_id") if stored else None
        if isinstance(tx_id, str) and tx_id:
            previous = Vgtid.from_json(tx_id)
        if isinstance(text, str) and text:
            epochs = ShardEpochMap.from_json(text)
            stored_generation = stored.get(CONNECTOR_GENERATION_KEY) if stored else None
            if isinstance(stored_generation, int) and stored_generation != connector_generation:
                epochs = epochs.incremented()
        else:
            base = dict(initial_epochs or {})
            for sg in previous:
                base.setdefault(sg.shard, 0)
            epochs = ShardEpochMap(base)
        return cls(epochs, previous, inherit)

    def offset_items(self, connector_generation: int) -> list[tuple[str, JsonValue]]:
        """The offset fields this state adds (``transaction_epoch``, ``connector_generation``)."""
        return [
            (TRANSACTION_EPOCH_KEY, self.epochs.to_json()),
            (CONNECTOR_GENERATION_KEY, connector_generation),
        ]
