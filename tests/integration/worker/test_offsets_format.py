"""Offsets in Debezium's exact byte format: VGTID JSON, offsets-topic keys and values, Java compatibility.

The expected bytes are written out literally from the formats Debezium and Kafka Connect produce
(reference §2, Debezium's VgtidTest/TablePrimaryKeysTest fixtures), and cross-checked against the
JDK + Jackson + kafka-clients themselves (a small Java oracle run on the broker's jars).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cdcworker.offsets import (
    LastPK,
    OffsetPartition,
    OffsetValue,
    PKField,
    PKRow,
    ShardGtid,
    TableLastPK,
    TaskKey,
    Vgtid,
    jackson_bytes,
    jackson_dumps,
    java_hashmap_order,
    java_murmur2_partition,
    murmur2,
    offset_record_key,
    parse_offset_record_key,
    partition_from_map,
)
from cdcworker.offsets.javacompat import java_string_hash
from localkafka import kafka_home

GTID1 = "MySQL56/a790d864-9ba1-11ea-99f6-0242ac11000a:1-1513"
GTID2 = "MySQL56/a790d864-9ba1-11ea-99f6-0242ac11000b:1-1513"

# Debezium's TablePrimaryKeysTest comp_pk_table fixture, compact as Jackson writes it.
COMP_PK_JSON = (
    '{"table_name":"comp_pk_table","lastpk":{"fields":['
    '{"name":"id","type":"INT64","charset":63,"flags":49667},'
    '{"name":"int_col","type":"INT32","charset":63,"flags":53251}],'
    '"rows":[{"lengths":["2","1"],"values":"101"}]}}'
)
VGTID_PLAIN = (
    f'[{{"keyspace":"test_keyspace","shard":"-80","gtid":"{GTID1}","table_p_ks":[]}},'
    f'{{"keyspace":"test_keyspace","shard":"80-","gtid":"{GTID2}","table_p_ks":[]}}]'
)
VGTID_COPY = (
    f'[{{"keyspace":"test_keyspace","shard":"-80","gtid":"{GTID1}","table_p_ks":[{COMP_PK_JSON}]}},'
    f'{{"keyspace":"test_keyspace","shard":"80-","gtid":"{GTID2}","table_p_ks":[]}}]'
)
COMP_PK = TableLastPK(
    "comp_pk_table",
    LastPK(
        (PKField("id", "INT64", 63, 49667), PKField("int_col", "INT32", 63, 53251)),
        (PKRow((2, 1), b"101"),),
    ),
)


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# -- VGTID JSON ------------------------------------------------------------------------------------


def test_vgtid_json_round_trip_exact() -> None:
    for text in (VGTID_PLAIN, VGTID_COPY):
        assert Vgtid.from_json(text).to_json() == text
    vgtid = Vgtid.from_json(VGTID_COPY)
    assert vgtid.shard_gtids == (
        ShardGtid("test_keyspace", "-80", GTID1, (COMP_PK,)),
        ShardGtid("test_keyspace", "80-", GTID2),
    )
    assert vgtid.copying and not Vgtid.from_json(VGTID_PLAIN).copying
    assert Vgtid.of("ks", {"-80": "", "80-": "current"}).copying


def test_vgtid_without_table_p_ks_reads_as_empty_and_writes_it() -> None:
    old = f'[{{"keyspace":"ks","shard":"0","gtid":"{GTID1}"}}]'
    assert (
        Vgtid.from_json(old).to_json()
        == f'[{{"keyspace":"ks","shard":"0","gtid":"{GTID1}","table_p_ks":[]}}]'
    )


def test_vgtid_proto_round_trip() -> None:
    from vitessapi import binlogdata_pb2, query_pb2

    vgtid = Vgtid.from_json(VGTID_COPY)
    pb = vgtid.to_proto()
    assert isinstance(pb, binlogdata_pb2.VGtid)
    first = pb.shard_gtids[0]
    assert (first.keyspace, first.shard, first.gtid) == ("test_keyspace", "-80", GTID1)
    lastpk = first.table_p_ks[0].lastpk
    assert [(f.name, f.type, f.charset, f.flags) for f in lastpk.fields] == [
        ("id", query_pb2.INT64, 63, 49667),
        ("int_col", query_pb2.INT32, 63, 53251),
    ]
    assert [(list(r.lengths), r.values) for r in lastpk.rows] == [([2, 1], b"101")]
    assert len(pb.shard_gtids[1].table_p_ks) == 0
    again = Vgtid.from_proto(binlogdata_pb2.VGtid.FromString(pb.SerializeToString()))
    assert again == vgtid and again.to_json() == VGTID_COPY


def test_binary_lastpk_bytes_survive_json() -> None:
    raw = bytes(range(256))
    vgtid = Vgtid(
        (
            ShardGtid(
                "ks",
                "-80",
                "",
                (TableLastPK("t", LastPK((PKField("id", "VARBINARY", 63, 4227),), (PKRow((256,), raw),))),),
            ),
        )
    )
    text = vgtid.to_json()
    text.encode("utf-8")  # always encodable
    assert Vgtid.from_json(text).shard_gtids[0].table_p_ks[0].lastpk.rows[0].values == raw
    # NULL lengths and negative (signed) flags as Java writes them
    row = PKRow((-1, 3), b"abc")
    assert row.to_json() == {"lengths": ["-1", "3"], "values": "abc"}
    assert PKField("x", "INT64", 63, 0x80000001).to_json()["flags"] == -2147483647
    assert (
        PKField.from_json({"name": "x", "type": "INT64", "charset": 63, "flags": -2147483647}).flags
        == 0x80000001
    )


def test_vgtid_update_and_subset() -> None:
    base = Vgtid.of("ks", [("-80", "a"), ("80-", "b")])
    updated = base.update([ShardGtid("ks", "80-", "c"), ShardGtid("ks", "c0-", "d")])
    assert updated == Vgtid.of("ks", [("-80", "a"), ("80-", "c"), ("c0-", "d")])
    assert updated.only(["c0-", "-80"]).shards == ["-80", "c0-"]
    assert Vgtid.from_json(VGTID_COPY).without_copy_state().to_json() == VGTID_PLAIN
    with pytest.raises(ValueError, match="duplicate shard"):
        Vgtid.of("ks", [("-80", "a"), ("-80", "b")])
    with pytest.raises(ValueError):
        Vgtid.from_json('{"keyspace":"ks"}')


# -- keys ----------------------------------------------------------------------------------------


def test_offset_record_keys_exact_bytes() -> None:
    assert (
        offset_record_key("vitess-conn", OffsetPartition("dbserver"))
        == b'["vitess-conn",{"server":"dbserver"}]'
    )
    key = offset_record_key("vitess-conn", OffsetPartition.for_task("dbserver", 1, 2, 3))
    assert key == b'["vitess-conn",{"server":"dbserver","task_key":"task1_2_3"}]'
    assert parse_offset_record_key(key) == ("vitess-conn", {"server": "dbserver", "task_key": "task1_2_3"})
    assert partition_from_map({"server": "dbserver", "task_key": "task1_2_3"}) == OffsetPartition(
        "dbserver", "task1_2_3"
    )
    assert partition_from_map({"server": "s", "shard": "-80"}) is None
    assert TaskKey.parse("task1_2_3") == TaskKey(1, 2, 3) and str(TaskKey(0, 4, 2)) == "task0_4_2"
    assert (
        str(OffsetPartition("s", "task0_1_0"))
        == "VitessPartition [sourcePartition={server=s, task_key=task0_1_0}]"
    )
    with pytest.raises(ValueError):
        parse_offset_record_key(b'{"server":"x"}')


# -- values: Debezium -> shardcdc -> Debezium ------------------------------------------------------


def test_debezium_value_bytes_round_trip() -> None:
    plain = ('{"vgtid":"' + _escaped(VGTID_PLAIN) + '"}').encode()
    copy = ('{"vgtid":"' + _escaped(VGTID_COPY) + '"}').encode()
    for data in (plain, copy):
        value = OffsetValue.from_bytes(data)
        assert value.to_bytes() == data
        assert value.vgtid.to_json().encode() in (VGTID_PLAIN.encode(), VGTID_COPY.encode())
    # Built from the model, we write what Debezium writes.
    assert OffsetValue.build(Vgtid.from_json(VGTID_COPY)).to_bytes() == copy
    # With transaction metadata on: transaction_id first (HashMap order), then vgtid.
    txn = (
        '{"transaction_id":"' + _escaped(VGTID_PLAIN) + '","vgtid":"' + _escaped(VGTID_PLAIN) + '"}'
    ).encode()
    parsed = OffsetValue.from_bytes(txn)
    assert parsed.to_bytes() == txn
    assert OffsetValue.build(Vgtid.from_json(VGTID_PLAIN), transaction_id=VGTID_PLAIN).to_bytes() == txn
    # Replacing the vgtid keeps every other field where it was.
    moved = parsed.with_vgtid(Vgtid.from_json(VGTID_COPY)).to_bytes()
    assert (
        moved
        == (
            '{"transaction_id":"' + _escaped(VGTID_PLAIN) + '","vgtid":"' + _escaped(VGTID_COPY) + '"}'
        ).encode()
    )


def test_shardcdc_value_is_readable_as_debezium_writes_it() -> None:
    # shardcdc -> Debezium: what we write for a position is byte-identical to Debezium's own record.
    vgtid = Vgtid(
        (ShardGtid("test_keyspace", "-80", GTID1, (COMP_PK,)), ShardGtid("test_keyspace", "80-", GTID2))
    )
    key = offset_record_key("conn", OffsetPartition.for_task("prefix", 0, 1, 0))
    value = OffsetValue.build(vgtid).to_bytes()
    assert key == b'["conn",{"server":"prefix","task_key":"task0_1_0"}]'
    assert value == ('{"vgtid":"' + _escaped(VGTID_COPY) + '"}').encode()


# -- Java compatibility ---------------------------------------------------------------------------


def test_murmur2_kafka_vectors() -> None:
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected
    assert java_murmur2_partition(b"21", 25) == (-973932308 & 0x7FFFFFFF) % 25
    with pytest.raises(ValueError):
        java_murmur2_partition(b"x", 0)


def test_java_string_hash_and_hashmap_order() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("") == 0
    assert java_hashmap_order(["task_key", "server"]) == ["server", "task_key"]
    assert java_hashmap_order(["vgtid", "transaction_id"]) == ["transaction_id", "vgtid"]


def test_jackson_string_escapes() -> None:
    text = "".join(chr(c) for c in range(0x20)) + '"\\/\x7f é€😀'
    expected = (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000B\\f\\r\\u000E\\u000F'
        "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001A\\u001B\\u001C\\u001D"
        '\\u001E\\u001F\\"\\\\/\x7f é€😀"'
    )
    assert jackson_dumps(text) == expected
    assert jackson_bytes("😀") == b'"\\uD83D\\uDE00"'
    assert jackson_dumps({"a": [1, None, True, False, -5]}) == '{"a":[1,null,true,false,-5]}'
    with pytest.raises(TypeError):
        jackson_dumps(1.5)


ORACLE_SOURCE = r"""
// Ground truth for tests/integration/worker/test_offsets_format.py: the JDK's String.hashCode and HashMap order, Jackson's
// JSON writer (as Kafka Connect's JsonConverter uses it for schemaless maps and lists) and Kafka's
// Utils.murmur2. Run with the Kafka jars on the classpath; reads cases from stdin, one per line:
//   hash <s> | order <k1> <k2> ... | json-string <s> | murmur2 <hex> | key <name> <server> [<task_key>]
//   value <vgtid-json> [<transaction_id> [<count-name> <count> ...]]
// Arguments are hex-encoded UTF-8; output is one line per case (hex for byte results).
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import com.fasterxml.jackson.databind.*;
import com.fasterxml.jackson.databind.node.*;
import org.apache.kafka.common.utils.Utils;

public class offsets_java_oracle {
    static final ObjectMapper MAPPER = new ObjectMapper();
    static final JsonNodeFactory F = JsonNodeFactory.withExactBigDecimals(true);

    static String unhex(String h) {
        byte[] b = new byte[h.length() / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return new String(b, StandardCharsets.UTF_8);
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x));
        return sb.toString();
    }

    // Schemaless conversion in the manner of JsonConverter.convertToJson(null, value).
    static JsonNode node(Object v) {
        if (v == null) return null;
        if (v instanceof String) return F.textNode((String) v);
        if (v instanceof Long) return F.numberNode((Long) v);
        if (v instanceof List) {
            ArrayNode a = F.arrayNode();
            for (Object o : (List<?>) v) a.add(node(o));
            return a;
        }
        if (v instanceof Map) {
            ObjectNode o = F.objectNode();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) o.set((String) e.getKey(), node(e.getValue()));
            return o;
        }
        throw new IllegalArgumentException(v.getClass().toString());
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] p = line.split(" ", -1);
            switch (p[0]) {
                case "hash":
                    System.out.println(unhex(p.length > 1 ? p[1] : "").hashCode());
                    break;
                case "order": {
                    Map<String, Long> m = new HashMap<>();
                    for (int i = 1; i < p.length; i++) m.put(unhex(p[i]), 0L);
                    StringBuilder sb = new StringBuilder();
                    for (String k : m.keySet()) sb.append(hex(k.getBytes(StandardCharsets.UTF_8))).append(' ');
                    System.out.println(sb.toString().trim());
                    break;
                }
                case "json-string":
                    System.out.println(hex(MAPPER.writeValueAsBytes(F.textNode(unhex(p[1])))));
                    break;
                case "json-chars":
                    System.out.println(hex(MAPPER.writeValueAsString(F.textNode(unhex(p[1]))).getBytes(StandardCharsets.UTF_8)));
                    break;
                case "murmur2":
                    byte[] b = new byte[p[1].length() / 2];
                    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(p[1].substring(2 * i, 2 * i + 2), 16);
                    System.out.println(Utils.murmur2(b) + " " + Utils.toPositive(Utils.murmur2(b)) % 25);
                    break;
                case "key": {
                    Map<String, Object> partition = new HashMap<>();
                    partition.put("server", unhex(p[2]));
                    if (p.length > 3) partition.put("task_key", unhex(p[3]));
                    System.out.println(hex(MAPPER.writeValueAsBytes(node(Arrays.asList(unhex(p[1]), partition)))));
                    break;
                }
                case "value": {
                    Map<String, Object> offset = new HashMap<>();
                    offset.put("vgtid", unhex(p[1]));
                    if (p.length > 2) offset.put("transaction_id", unhex(p[2]));
                    Map<String, Long> counts = new HashMap<>();
                    for (int i = 3; i + 1 < p.length; i += 2) counts.put(unhex(p[i]), Long.parseLong(unhex(p[i + 1])));
                    for (Map.Entry<String, Long> e : counts.entrySet())
                        offset.put("transaction_data_collection_order_" + e.getKey(), e.getValue());
                    System.out.println(hex(MAPPER.writeValueAsBytes(node(offset))));
                    break;
                }
                default:
                    throw new IllegalArgumentException(p[0]);
            }
        }
    }
}
"""


def _hex(s: str) -> str:
    return s.encode("utf-8").hex()


@pytest.fixture(scope="module")
def java_oracle(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[str]], list[str]]:
    """Run a batch of cases through the JDK/Jackson/kafka-clients oracle; returns output lines."""
    libs = kafka_home() / "libs"
    if shutil.which("java") is None or not libs.is_dir():
        pytest.fail("the Java oracle needs java and the Kafka jars (make kafka)")
    path: Path = tmp_path_factory.mktemp("oracle") / "offsets_java_oracle.java"
    path.write_text(ORACLE_SOURCE)

    def run(lines: list[str]) -> list[str]:
        proc = subprocess.run(
            ["java", "-cp", str(libs / "*"), str(path)],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1"},
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.splitlines()

    return run


def test_against_jdk_jackson_and_kafka(java_oracle: Callable[[list[str]], list[str]]) -> None:
    hash_inputs = [
        "",
        "server",
        "task_key",
        "vgtid",
        "transaction_id",
        "é€😀",
        "polygenelubricants",
        "-80.ks.t",
    ]
    order_sets = [
        ["server", "task_key"],
        ["vgtid", "transaction_id"],
        ["vgtid", "transaction_id"]
        + [f"transaction_data_collection_order_{s}.ks.t{i}" for s in ("-80", "80-") for i in range(9)],
        [f"k{i}" for i in range(40)],
        ["transaction_epoch", "vgtid", "connector_generation", "transaction_id"],
    ]
    text = "".join(chr(c) for c in range(0x20)) + '"\\/\x7f é€😀\u2028'
    murmur_inputs = [
        b"",
        b"a",
        b"ab",
        b"abc",
        b"abcd",
        bytes(range(256)),
        b'["c",{"server":"p","task_key":"task0_2_1"}]',
    ]
    key_cases = [
        ("vitess-conn", "dbserver", None),
        ("vitess-conn", "dbserver", "task1_4_2"),
        ('n"é😀', "p\\x", "task0_1_0"),
    ]
    counts = {"-80.test_keyspace.t1": 3, "80-.test_keyspace.t2": 12, "-80.test_keyspace.t3": 1}
    value_cases: list[tuple[str, str | None, dict[str, int]]] = [
        (VGTID_PLAIN, None, {}),
        (VGTID_COPY, None, {}),
        (VGTID_PLAIN, VGTID_COPY, counts),
        (Vgtid.of("ks€", {"-80": "MySQL56/😀:1-5"}).to_json(), "tx\x01", {"😀.é.t": 7}),
    ]
    lines = [f"hash {_hex(s)}" for s in hash_inputs]
    lines += ["order " + " ".join(_hex(k) for k in keys) for keys in order_sets]
    lines.append(f"json-string {_hex(text)}")
    lines.append(f"json-chars {_hex(text)}")
    lines += [f"murmur2 {data.hex()}" for data in murmur_inputs]
    lines += [" ".join(["key", _hex(n), _hex(s)] + ([_hex(t)] if t else [])) for n, s, t in key_cases]
    for vg, txn, cnt in value_cases:
        parts = ["value", _hex(vg)]
        if txn is not None:
            parts.append(_hex(txn))
            for name, n in cnt.items():
                parts += [_hex(name), _hex(str(n))]
        lines.append(" ".join(parts))
    out = iter(java_oracle(lines))

    for s in hash_inputs:
        assert int(next(out)) == java_string_hash(s), s
    for keys in order_sets:
        assert [bytes.fromhex(h).decode() for h in next(out).split()] == java_hashmap_order(keys)
    assert bytes.fromhex(next(out)) == jackson_bytes(text)
    assert bytes.fromhex(next(out)).decode() == jackson_dumps(text)
    for data in murmur_inputs:
        h, p = next(out).split()
        assert (int(h), int(p)) == (murmur2(data), java_murmur2_partition(data, 25))
    for name, server, task in key_cases:
        assert bytes.fromhex(next(out)) == offset_record_key(name, OffsetPartition(server, task))
    for vg, txn, cnt in value_cases:
        java_bytes = bytes.fromhex(next(out))
        ours = OffsetValue.build(
            Vgtid.from_json(vg), transaction_id=txn, collection_counts=cnt or None
        ).to_bytes()
        assert ours == java_bytes
        assert OffsetValue.from_bytes(java_bytes).to_bytes() == java_bytes
