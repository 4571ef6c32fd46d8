"""The source block from its cached template (``source_template``) is byte for byte the block the
JSON writer makes of the same fields: every string escaped Jackson's way, ``%`` in names kept."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from cdcworker.events.jsonfmt import dumps, json_string_body
from cdcworker.events.source import SourceContext

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["%d", "%b", "%%", "a\"b\\c"])


def written_whole(ctx: SourceContext, version: str, name: str, table: str, unset: str | None) -> bytes:
    """The block as the JSON writer makes it (the encoder's way before the template)."""
    s = ctx.commit_seconds
    block = {"version": version, "connector": "vitess", "name": name, "ts_ms": s * 1000,
             "snapshot": unset if ctx.snapshot is None else ctx.snapshot, "db": "", "sequence": None,
             "ts_us": s * 1_000_000, "ts_ns": s * 1_000_000_000, "keyspace": ctx.keyspace, "table": table,
             "shard": ctx.shard}
    return dumps(block)[:-1] + b',"vgtid":"' + json_string_body(ctx.vgtid) + b'"}'


@settings(max_examples=400, deadline=None)
@given(keyspace=TEXT, shard=TEXT, seconds=st.integers(0, 2**32), vgtid=TEXT, snapshot=st.none() | TEXT,
       version=TEXT, name=TEXT, table=TEXT, unset=st.none() | st.just("false"))
def test_the_template_writes_the_bytes_the_json_writer_would(keyspace: str, shard: str, seconds: int, vgtid: str,
                                                              snapshot: str | None, version: str, name: str,
                                                              table: str, unset: str | None) -> None:
    ctx = SourceContext(keyspace, shard, seconds, vgtid, snapshot)
    assert orjson.dumps(ctx.fragment(version, name, table, unset)) == written_whole(ctx, version, name, table, unset)


def test_each_table_of_a_transaction_gets_its_own_block_with_the_same_vgtid() -> None:
    vgtid = '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/a:1-5","table_p_ks":[]}]'
    ctx = SourceContext("ks", "-80", 1_700_000_000, vgtid)
    a, b = (orjson.loads(orjson.dumps(ctx.fragment("3.5.0.Final", "dbserver", t))) for t in ("t1", "t2"))
    assert (a["table"], b["table"]) == ("t1", "t2")
    assert a["vgtid"] == b["vgtid"] == vgtid
    assert (a["ts_ms"], a["ts_us"], a["ts_ns"]) == (1_700_000_000_000, 1_700_000_000_000_000, 1_700_000_000_000_000_000)
