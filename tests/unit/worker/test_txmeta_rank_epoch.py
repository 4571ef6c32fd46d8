"""Rank and epoch computation (Debezium's VitessRankProvider, Gtid, VitessEpochProvider, ShardLineage)."""

from __future__ import annotations

import pytest

from cdcworker.offsets.vgtid import Vgtid
from cdcworker.txmeta.epoch import (
    EpochError,
    EpochProvider,
    ShardEpochMap,
    epoch_for_gtid,
    inherited_epoch,
    next_epoch_map,
    unrankable,
)
from cdcworker.txmeta.rank import decimal_json, host_key, parse_gtid, rank, rank_json

U1 = "027a0d3e-93a1-11ee-8d36-0242ac110002"
U2 = "1e7ab2c6-93a1-11ee-8b58-0242ac110003"


# --- rank -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gtid", "expected"),
    [
        ("host1:1-4,host2:2-10", 14),
        ("MySQL56/host1:1-4,host2:2-10", 14),
        (f"MySQL56/{U1}:1-1513", 1513),
        (f"MySQL56/{U1}:7", 7),  # single position: the number itself
        (f"MySQL56/{U1}:1-5:7-10", 5),  # quirk: only the first interval counts
        (f"MySQL56/{U1}:1-5:7-10,{U2}:1-3", 8),
        ("MySQL56/a:1-18446744073709551615,b:1-18446744073709551615", 2 * 18446744073709551615),
    ],
)
def test_rank(gtid: str, expected: int) -> None:
    assert rank(gtid) == expected


# Forms around the single-host fast path (``host_key``): each must give what the general parse gives.
_FORMS = [
    f"MySQL56/{U1}:1-1513", f"MySQL56/{U1}:7", f"MySQL56/{U2}:1-1513", f"MariaDB/{U1}:1-1513", f"/{U1}:1-9",
    f"MySQL56/{U1}:1-5:7-10", f"MySQL56/{U1}:1-5,{U2}:1-3", f"MySQL56/{U1}:1-5,", f"MySQL56/{U1}:1-2-3",
    f"MySQL56/{U1}:+5", f"MySQL56/{U1}:1--5", f"{U1}:1-4", f"a/b/{U1}:1-4", f"MySQL56/{U1}:00012",
    f"MySQL56/{U1}:1-99999999999999999999999",
]


@pytest.mark.parametrize("gtid", _FORMS)
def test_fast_rank_equals_the_general_parse(gtid: str) -> None:
    assert rank(gtid) == sum(parse_gtid(gtid).sequences)


def test_fast_same_hosts_equals_the_host_lists() -> None:
    from cdcworker.txmeta import epoch

    for a in _FORMS:
        for b in _FORMS:
            slow = epoch._host_list(a) == epoch._host_list(b)
            assert epoch._same_hosts(a, b) == slow, (a, b)
    assert host_key(f"MySQL56/{U1}:1-1513") == f"MySQL56/{U1}"
    assert host_key(f"MySQL56/{U1}:1-5,{U2}:1-3") is None  # several hosts: the general parse decides


def test_parse_gtid_hosts_and_flavor() -> None:
    p = parse_gtid(f"MySQL56/{U1}:1-4,{U2}:2-10")
    assert p.flavor == "MySQL56"
    assert p.hosts == frozenset({U1, U2})
    assert p.sequences == (4, 10)


@pytest.mark.parametrize(
    "gtid", ["current", "", "MySQL56/", f"MySQL56/{U1}:", f"MySQL56/{U1}:1-x", f"{U1}:1_0"]
)
def test_rank_unparseable(gtid: str) -> None:
    with pytest.raises(ValueError, match="Error parsing GTID"):
        rank(gtid)


@pytest.mark.parametrize(
    ("value", "base64", "numeric"),
    [
        (0, "AA==", 0),
        (1, "AQ==", 1),
        (127, "fw==", 127),
        (128, "AIA=", 128),
        (1513, "Bek=", 1513),
        (65536, "AQAA", 65536),
    ],
)
def test_rank_decimal_encoding(value: int, base64: str, numeric: int) -> None:
    # BigInteger.toByteArray (minimal two's complement) in base64, or a plain number with NUMERIC.
    assert decimal_json(value, numeric=False) == base64
    assert decimal_json(value, numeric=True) == numeric


def test_rank_json() -> None:
    assert rank_json(f"MySQL56/{U1}:1-1513") == "Bek="
    assert rank_json(f"MySQL56/{U1}:1-1513", numeric=True) == 1513


# --- single shard epoch rules -----------------------------------------------------------------


def g(*parts: str) -> str:
    return "MySQL56/" + ",".join(parts)


@pytest.mark.parametrize(
    ("prev", "cur", "expected"),
    [
        ("current", "current", 3),  # still waiting for the first transaction
        ("", "current", 3),
        ("current", g(f"{U1}:1-5"), 4),  # override -> real: +1
        ("", g(f"{U1}:1-5"), 4),  # snapshot start -> real: +1
        (g(f"{U1}:1-5"), g(f"{U1}:1-6"), 3),  # same host set
        (g(f"{U1}:1-5"), g(f"{U1}:1-6", f"{U2}:1-1"), 3),  # superset (new primary keeps history)
        (g(f"{U1}:1-6", f"{U2}:1-1"), g(f"{U2}:1-2"), 4),  # shrunk host set
        (g(f"{U1}:1-6"), g(f"{U2}:1-2"), 4),  # disjoint
        (g(f"{U1}:1-6"), f"MariaDB/{U1}:1-7", 3),  # flavor ignored
    ],
)
def test_epoch_for_gtid(prev: str, cur: str, expected: int) -> None:
    assert epoch_for_gtid(3, prev, cur) == expected


@pytest.mark.parametrize("cur", ["current", ""])
def test_real_then_override_is_an_error(cur: str) -> None:
    with pytest.raises(EpochError, match="Current GTID cannot be override value if previous is standard"):
        epoch_for_gtid(0, g(f"{U1}:1-5"), cur)


# --- maps ---------------------------------------------------------------------------------------


def test_shard_epoch_map_json_is_sorted_and_compact() -> None:
    m = ShardEpochMap({"80-": 1, "-80": 0, "0": 5})
    assert m.to_json() == '{"-80":0,"0":5,"80-":1}'
    assert ShardEpochMap.from_json('{"80-":1,"-80":0}') == ShardEpochMap({"-80": 0, "80-": 1})
    assert m.incremented().to_json() == '{"-80":1,"0":6,"80-":2}'
    with pytest.raises(EpochError):
        ShardEpochMap.from_json('{"-80":"x"}')


def V(*pairs: tuple[str, str]) -> Vgtid:
    return Vgtid.of("ks", list(pairs))


def test_map_is_replaced_new_shards_zero_missing_dropped() -> None:
    prev = V(("-80", g(f"{U1}:1-5")), ("80-", g(f"{U2}:1-5")))
    cur = V(("-40", g(f"{U1}:1-1")), ("40-80", g(f"{U1}:1-1")), ("80-", g(f"{U2}:1-6")))
    out = next_epoch_map({"-80": 2, "80-": 1}, prev, cur, inherit=False)
    assert out.to_json() == '{"-40":0,"40-80":0,"80-":1}'


def test_inherit_epoch_from_overlapping_parents() -> None:
    prev = V(("-80", g(f"{U1}:1-5")), ("80-", g(f"{U2}:1-5")))
    cur = V(("-40", g(f"{U1}:1-1")), ("40-80", g(f"{U1}:1-1")), ("80-", g(f"{U2}:1-6")))
    out = next_epoch_map({"-80": 2, "80-": 7}, prev, cur, inherit=True)
    assert out.to_json() == '{"-40":3,"40-80":3,"80-":7}'
    # A merge takes the highest overlapping epoch; "0" (unsharded) overlaps everything.
    assert inherited_epoch("-", {"-80": 2, "80-": 7}) == 8
    assert inherited_epoch("-80", {"0": 4}) == 5
    assert inherited_epoch("80-c0", {"-80": 4}) == 0  # no overlap
    # the unnamed shard of a start from "current" covers every key (Debezium's ShardLineage)
    assert inherited_epoch("80-", {"": 0}) == 1
    with pytest.raises(EpochError, match="Invalid shard range"):
        inherited_epoch("80-30", {"0": 1})


def test_missing_previous_epoch_is_an_error() -> None:
    prev = V(("-80", g(f"{U1}:1-5")))
    with pytest.raises(EpochError, match="Previous epoch cannot be null for shard -80"):
        next_epoch_map({}, prev, V(("-80", g(f"{U1}:1-6"))), inherit=False)


# --- provider ---------------------------------------------------------------------------------


def test_provider_start_from_current_gives_epoch_one() -> None:
    start = V(("-80", "current"), ("80-", "current"))
    p = EpochProvider.restore(None, start)
    assert p.epochs.to_json() == '{"-80":0,"80-":0}'
    tx = V(("-80", g(f"{U1}:1-5")), ("80-", "current"))
    assert p.epoch("-80", tx) == 1
    assert p.epochs.to_json() == '{"-80":1,"80-":0}'
    tx2 = V(("-80", g(f"{U1}:1-5")), ("80-", g(f"{U2}:1-9")))
    assert p.epoch("80-", tx2.to_json()) == 1
    assert p.offset_items(0) == [("transaction_epoch", '{"-80":1,"80-":1}'), ("connector_generation", 0)]


def test_provider_initial_epochs_from_config() -> None:
    p = EpochProvider.restore(
        None, V(("-80", g(f"{U1}:1-5")), ("80-", g(f"{U2}:1-5"))), initial_epochs={"-80": 4}
    )
    assert p.epochs.to_json() == '{"-80":4,"80-":0}'
    assert p.epoch("-80", V(("-80", g(f"{U1}:1-6")), ("80-", g(f"{U2}:1-5")))) == 4


def test_provider_without_previous_vgtid_fails() -> None:
    p = EpochProvider(ShardEpochMap(), None)
    with pytest.raises(EpochError, match="Previous vgtid string cannot be null"):
        p.epoch("-80", V(("-80", g(f"{U1}:1-6"))))


def stored(epochs: str, generation: int | None, tx: Vgtid | None = None) -> dict[str, object]:
    out: dict[str, object] = {"vgtid": "[]", "transaction_epoch": epochs}
    if tx is not None:
        out["transaction_id"] = tx.to_json()
    if generation is not None:
        out["connector_generation"] = generation
    return out


@pytest.mark.parametrize(
    ("stored_gen", "configured", "expected"),
    [(None, 0, 5), (None, 3, 5), (1, 1, 5), (1, 2, 6), (2, 1, 6)],  # missing = equal; up or down = +1
)
def test_provider_generation_change_increments_every_epoch(
    stored_gen: int | None, configured: int, expected: int
) -> None:
    last = V(("-80", g(f"{U1}:1-5")))
    p = EpochProvider.restore(stored('{"-80":5}', stored_gen, last), last, connector_generation=configured)
    assert p.epochs["-80"] == expected
    assert p.epoch("-80", V(("-80", g(f"{U1}:1-6")))) == expected


def test_provider_previous_vgtid_is_the_stored_transaction_id() -> None:
    # The stored transaction id (Debezium's previousVgtid) wins over the restart VGTID.
    last_tx = V(("-80", g(f"{U1}:1-9")))
    restart = V(("-80", g(f"{U1}:1-8")))
    p = EpochProvider.restore(stored('{"-80":2}', 0, last_tx), restart)
    assert p.previous_vgtid == last_tx
    # Without it, the restart VGTID is the previous one.
    q = EpochProvider.restore(stored('{"-80":2}', 0), restart)
    assert q.previous_vgtid == restart


_WHAT_TO_CHANGE = (r"^Error parsing GTID: MariaDB/0-1-6: transaction.metadata.factory=VitessOrderedTransactionMetadataFactory "
                   r".* use the default transaction.metadata.factory$")


def test_mariadb_gtids_have_no_epoch_and_the_error_says_what_to_change() -> None:
    """Debezium's ``Gtid`` reads MySQL56 sets only and fails its task on a MariaDB GTID (seen on real
    Vitess: docs/conformance.md, "On real Vitess"); so does shardcdc, in one line naming the setting."""
    start = Vgtid.from_json('[{"keyspace":"ks","shard":"0","gtid":"MariaDB/0-1-5"}]')
    vgtid = Vgtid.from_json('[{"keyspace":"ks","shard":"0","gtid":"MariaDB/0-1-6"}]')
    with pytest.raises(EpochError, match=_WHAT_TO_CHANGE):
        EpochProvider(ShardEpochMap({"0": 0}), start).epoch("0", vgtid)


def test_a_mariadb_gtid_has_no_rank_and_the_error_says_what_to_change() -> None:
    """After a start from ``current`` the epoch needs no parse; the rank does (the monitor raises this)."""
    with pytest.raises(ValueError, match="Error parsing GTID") as caught:
        rank("MariaDB/0-1-6")
    assert caught.value is not None
    with pytest.raises(EpochError, match=_WHAT_TO_CHANGE):
        raise unrankable(caught.value, "MariaDB/0-1-6")
    assert str(unrankable(ValueError("Error parsing GTID: x"), "MySQL56/")) == "Error parsing GTID: x"
