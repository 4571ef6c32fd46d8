"""Shard names, key ranges and the hash vindex (cdcworker.keyrange)."""

from __future__ import annotations

import pytest

from cdcworker import keyrange
from cdcworker.keyrange import (
    FULL_RANGE,
    KeyRange,
    ShardMap,
    contains,
    covers,
    even_shard_names,
    hash_keyspace_id,
    is_valid_shard_name,
    normalize,
    overlaps,
    parse_shard,
    shard_for_keyspace_id,
    sort_shards,
    unhash_keyspace_id,
)

# Vitess go/vt/vtgate/vindexes/hash_test.go (TestHashMap): ids 1..6 and their
# keyspace ids, there written as Go string literals, e.g. "\x16k@\xb4J\xbaK\xd6".
HASH_VECTORS = [
    (1, "166b40b44aba4bd6"),
    (2, "06e7ea22ce92708f"),
    (3, "4eb190c9a2fa169c"),
    (4, "d2fd8867d50d2dfe"),
    (5, "70bb023c810ca87a"),
    (6, "f098480ac4c4be71"),
]


@pytest.mark.parametrize(("value", "ksid_hex"), HASH_VECTORS)
def test_hash_vindex_vitess_vectors(value: int, ksid_hex: str) -> None:
    ksid = hash_keyspace_id(value)
    assert ksid.hex() == ksid_hex
    assert unhash_keyspace_id(ksid) == value


def test_hash_vindex_signed_values_use_twos_complement() -> None:
    assert hash_keyspace_id(-1) == hash_keyspace_id(2**64 - 1)
    assert hash_keyspace_id(-(2**63)) == hash_keyspace_id(2**63)
    assert unhash_keyspace_id(hash_keyspace_id(-1)) == 2**64 - 1
    assert hash_keyspace_id(0) != hash_keyspace_id(1)
    assert len(hash_keyspace_id(0)) == 8


def test_hash_vindex_is_stable_across_calls() -> None:
    # The per-thread ECB context is reused; block results must not depend on history.
    first = [hash_keyspace_id(v) for v in range(50)]
    assert [hash_keyspace_id(v) for v in reversed(range(50))] == list(reversed(first))


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1])
def test_hash_vindex_range_errors(bad: int) -> None:
    with pytest.raises(ValueError, match="out of"):
        hash_keyspace_id(bad)


def test_unhash_rejects_wrong_length() -> None:
    with pytest.raises(ValueError, match="invalid keyspace id: 166b40b44aba4bd6166b40b44aba4bd6"):
        unhash_keyspace_id(bytes.fromhex("166b40b44aba4bd6" * 2))


@pytest.mark.parametrize(
    ("name", "start", "end"),
    [
        ("0", b"", b""),
        ("-", b"", b""),
        ("-80", b"", b"\x80"),
        ("80-", b"\x80", b""),
        ("40-80", b"\x40", b"\x80"),
        ("80-c0", b"\x80", b"\xc0"),
        ("8000-c000", b"\x80", b"\xc0"),
        ("80-C0", b"\x80", b"\xc0"),
        ("00-80", b"", b"\x80"),
        ("0080-0100", b"\x00\x80", b"\x01"),
        ("-00", b"", b""),
    ],
)
def test_parse_shard(name: str, start: bytes, end: bytes) -> None:
    kr = parse_shard(name)
    assert (kr.start, kr.end) == (start, end)
    assert kr == KeyRange(start, end)


def test_equivalent_names_and_canonical_name() -> None:
    assert parse_shard("8000-c000") == parse_shard("80-c0")
    assert parse_shard("0000-8000") == parse_shard("-80")
    assert parse_shard("8000-c000").name == "80-c0"
    assert str(parse_shard("80-C0")) == "80-c0"
    assert parse_shard("0") == parse_shard("-") == FULL_RANGE
    assert FULL_RANGE.is_full and FULL_RANGE.name == "-"
    assert not parse_shard("-80").is_full


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "invalid shard name ''"),
        ("abc", "invalid shard name 'abc'"),
        ("8-", "even number of hex digits"),
        ("0-", "invalid shard name '0-'"),
        ("80-c0-", "invalid shard name '80-c0-'"),
        ("--", "invalid shard name '--'"),
        ("zz-", "invalid shard name 'zz-'"),
        ("c0-80", "start c0 is not strictly less than end 80"),
        ("80-80", "start 80 is not strictly less than end 80"),
        ("80-00", "start 80 is not strictly less than end 00"),
        ("80-8000", "strictly less than end 80"),
    ],
)
def test_parse_shard_errors(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shard(name)


def test_is_valid_shard_name() -> None:
    assert all(is_valid_shard_name(n) for n in ["0", "-", "-80", "80-", "80-c0", "8000-C000"])
    assert not any(is_valid_shard_name(n) for n in ["", "1", "8-", "80", "a-b", "-80-", " -80"])


def test_keyrange_constructor_normalizes_and_validates() -> None:
    assert KeyRange(b"\x80\x00", b"\xc0\x00\x00") == KeyRange(b"\x80", b"\xc0")
    # An all-zero end is empty after normalization, i.e. MAX (Vitess key.Empty).
    assert KeyRange(b"\x80", b"\x00").end == b""
    with pytest.raises(ValueError, match="must be strictly less than end"):
        KeyRange(b"\xc0", b"\x80")


def test_normalize() -> None:
    assert normalize(b"\x80\x00\x00") == b"\x80"
    assert normalize(b"\x00\x00") == b""
    assert normalize(b"\x00\x80") == b"\x00\x80"


@pytest.mark.parametrize(
    ("shard", "ksid_hex", "expected"),
    [
        ("-80", "00", True),
        ("-80", "", True),
        ("-80", "7fffffffffffffff", True),
        ("-80", "80", False),
        ("-80", "8000000000000000", False),
        ("80-", "80", True),
        ("80-", "ffffffffffffffff", True),
        ("80-", "7f", False),
        ("80-c0", "80", True),
        ("80-c0", "bfff", True),
        ("80-c0", "c0", False),
        ("80-c0", "c000000000000000", False),
        ("8000-c000", "c0", False),
        ("0", "ff", True),
        ("-", "", True),
    ],
)
def test_contains(shard: str, ksid_hex: str, expected: bool) -> None:
    assert contains(shard, bytes.fromhex(ksid_hex)) is expected
    assert parse_shard(shard).contains(bytes.fromhex(ksid_hex)) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("-80", "80-", False),
        ("-80", "40-c0", True),
        ("40-80", "80-c0", False),
        ("40-80", "7f-", True),
        ("0", "80-c0", True),
        ("-", "-", True),
        ("80-c0", "8000-c000", True),
        ("-40", "c0-", False),
    ],
)
def test_overlaps(a: str, b: str, expected: bool) -> None:
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


def test_even_shard_names() -> None:
    assert even_shard_names(1) == ["-"]
    assert even_shard_names(2) == ["-80", "80-"]
    assert even_shard_names(4) == ["-40", "40-80", "80-c0", "c0-"]
    eight = even_shard_names(8)
    assert eight == ["-20", "20-40", "40-60", "60-80", "80-a0", "a0-c0", "c0-e0", "e0-"]
    n256 = even_shard_names(256)
    assert (n256[0], n256[1], n256[128], n256[255]) == ("-01", "01-02", "80-81", "ff-")
    n512 = even_shard_names(512)
    assert len(n512) == 512
    assert n512[:3] == ["-0080", "0080-0100", "0100-0180"]
    assert n512[256] == "8000-8080"  # Vitess EvenShardsKeyRange(256, 512)
    assert n512[-1] == "ff80-"
    for n in (1, 2, 4, 16, 256, 512, 1024):
        names = even_shard_names(n)
        assert covers(names)
        assert sort_shards(names) == names


@pytest.mark.parametrize("n", [0, -2, 3, 6, 100])
def test_even_shard_names_rejects_non_power_of_two(n: int) -> None:
    with pytest.raises(ValueError, match="shard count must be"):
        even_shard_names(n)


def test_sort_shards() -> None:
    assert sort_shards(["c0-", "80-c0", "-40", "40-80"]) == ["-40", "40-80", "80-c0", "c0-"]
    assert sort_shards(["80-", "-80"]) == ["-80", "80-"]
    # Same start: the shorter (bounded) range sorts before the open-ended one.
    assert sort_shards(["80-", "80-c0", "-"]) == ["-", "80-c0", "80-"]
    # Names are returned as given, even non-canonical ones.
    assert sort_shards(["8000-", "-8000"]) == ["-8000", "8000-"]


def test_covers() -> None:
    assert covers(["-80", "80-"])
    assert covers(["80-", "-80"])
    assert covers(["0"])
    assert covers(["-"])
    assert covers(["-8000", "80-c0", "c000-"])
    assert covers([parse_shard("-80"), "80-"])
    assert not covers([])
    assert not covers(["-80"])  # gap at the top
    assert not covers(["80-"])  # gap at the bottom
    assert not covers(["-40", "80-"])  # gap in the middle
    assert not covers(["-80", "40-"])  # overlap
    assert not covers(["-80", "80-", "c0-"])  # overlap after MAX
    assert not covers(["-", "-80", "80-"])  # overlap with full range
    assert not covers(["0", "-"])


def test_shard_for_keyspace_id() -> None:
    shards = ["80-c0", "-40", "c0-", "40-80"]
    assert shard_for_keyspace_id(shards, bytes.fromhex("166b40b44aba4bd6")) == "-40"
    assert shard_for_keyspace_id(shards, bytes.fromhex("4eb190c9a2fa169c")) == "40-80"
    assert shard_for_keyspace_id(shards, bytes.fromhex("80")) == "80-c0"
    assert shard_for_keyspace_id(shards, bytes.fromhex("c0")) == "c0-"
    assert shard_for_keyspace_id(shards, bytes.fromhex("f098480ac4c4be71")) == "c0-"
    assert shard_for_keyspace_id(shards, b"") == "-40"
    assert shard_for_keyspace_id(["0"], bytes.fromhex("ff")) == "0"


def test_shard_for_keyspace_id_errors() -> None:
    with pytest.raises(LookupError, match="no shard covers keyspace id 90"):
        shard_for_keyspace_id(["-80", "c0-"], b"\x90")
    with pytest.raises(LookupError):
        shard_for_keyspace_id([], b"\x90")
    with pytest.raises(ValueError, match="shards overlap: -80 and 40-"):
        shard_for_keyspace_id(["-80", "40-"], b"\x90")
    with pytest.raises(ValueError, match="invalid shard name 'x'"):
        shard_for_keyspace_id(["x"], b"\x90")


def test_shard_map_routes_hash_vindex_ids() -> None:
    names = even_shard_names(16)
    shard_map = ShardMap(reversed(names))
    assert list(shard_map.names) == names
    for value, _ in HASH_VECTORS:
        ksid = hash_keyspace_id(value)
        expected = [n for n in names if contains(n, ksid)]
        assert len(expected) == 1
        assert shard_map.lookup(ksid) == expected[0]
    # id 1 -> 0x16... lies in 10-20 of 16 shards.
    assert shard_map.lookup(hash_keyspace_id(1)) == "10-20"


def test_parse_shard_is_cached() -> None:
    assert parse_shard("40-80") is parse_shard("40-80")
    assert keyrange.parse_shard.cache_info().hits > 0
