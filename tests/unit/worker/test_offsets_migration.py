"""Generation migration of per-task offsets, against Debezium's rules (reference §2), on offsets-topic bytes."""

from __future__ import annotations

from typing import Any

import pytest

from cdcworker.offsets import (
    LastPK,
    MissingOffsetsError,
    OffsetPartition,
    OffsetValue,
    PKField,
    PKRow,
    SameGenerationError,
    ShardGtid,
    ShardLossError,
    TableLastPK,
    TaskAssignment,
    Vgtid,
    assign_shards,
    configured_start,
    java_sorted,
    lookup_in,
    offset_record_key,
    plan_tasks,
    resolve_task_start,
)
from cdcworker.offsets.migration import MigrationError

NAME = "vitess-conn"
SERVER = "prefix"
KS = "ks"
COPY = (TableLastPK("t", LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((2,), b"10"),))),)


def debezium_records(entries: dict[str | None, list[tuple[str, str] | ShardGtid]]) -> dict[bytes, bytes]:
    """Offsets-topic records as Debezium writes them: task key (None = plain server) -> positions."""
    records: dict[bytes, bytes] = {}
    for task_key, positions in entries.items():
        vgtid = Vgtid(tuple(p if isinstance(p, ShardGtid) else ShardGtid(KS, p[0], p[1]) for p in positions))
        key = offset_record_key(NAME, OffsetPartition(SERVER, task_key))
        records[key] = ('{"vgtid":"' + vgtid.to_json().replace('"', '\\"') + '"}').encode()
    return records


def plan(records: dict[bytes, bytes], **kw: Any) -> list[TaskAssignment]:
    return plan_tasks(lookup_in(records, NAME), server=SERVER, keyspace=KS, **kw)


def shapes(assignments: list[TaskAssignment]) -> list[tuple[str, list[str], str]]:
    return [(a.task_key, a.shards, a.start.to_json()) for a in assignments]


def test_assign_shards_round_robin_over_java_sorted_shards() -> None:
    assert assign_shards(["90-", "-80", "80-90"], 2) == [["-80", "90-"], ["80-90"]]
    assert assign_shards(["c0-", "80-c0", "40-80", "-40"], 4) == [["-40"], ["40-80"], ["80-c0"], ["c0-"]]
    assert assign_shards(["-80", "80-"], 5) == [["-80"], ["80-"]]  # only as many tasks as shards
    assert assign_shards(["-40", "40-80", "80-c0", "c0-"], 3) == [["-40", "c0-"], ["40-80"], ["80-c0"]]
    assert java_sorted(["c0-", "-40", "80-c0", "40-80"]) == ["-40", "40-80", "80-c0", "c0-"]
    with pytest.raises(ValueError):
        assign_shards(["-80"], 0)


def test_fresh_single_task_gen0_uses_configured_start() -> None:
    result = plan({}, tasks_max=1, gen=0, prev_task_count=-1, current_shards=["80-", "-80"], vgtid_setting="")
    assert [(a.task_key, a.shards) for a in result] == [("task0_1_0", ["-80", "80-"])]
    assert result[0].start == Vgtid.of(KS, [("-80", ""), ("80-", "")])
    assert result[0].sources == {"-80": "config", "80-": "config"}


def test_gen0_falls_back_to_plain_server_partition() -> None:
    # Offsets written before per-task mode count as generation 0 ("task0_1_0").
    records = debezium_records({None: [("-80", "g1"), ("80-", "g2")]})
    result = plan(records, tasks_max=1, gen=0, prev_task_count=-1, current_shards=["-80", "80-"])
    assert result[0].start == Vgtid.of(KS, [("-80", "g1"), ("80-", "g2")])
    start = resolve_task_start(
        lookup_in(records, NAME),
        server=SERVER,
        keyspace=KS,
        shards=["-80", "80-"],
        task_id=0,
        task_count=1,
        gen=0,
    )
    assert start.vgtid == Vgtid.of(KS, [("-80", "g1"), ("80-", "g2")])
    assert start.sources == {"-80": "current-generation", "80-": "current-generation"}
    # Per-task mode off: the plain server partition is the task's own offset.
    own = resolve_task_start(lookup_in(records, NAME), server=SERVER, keyspace=KS, shards=["-80", "80-"])
    assert own.stored is not None and own.vgtid == start.vgtid


def test_server_partition_to_gen1_two_tasks_keeps_copy_state() -> None:
    # Debezium docs: switch on per-task mode with gen=1, prev.num.tasks=1.
    records = debezium_records({None: [ShardGtid(KS, "-80", "g1", COPY), ("80-", "g2")]})
    result = plan(records, tasks_max=2, gen=1, prev_task_count=1, current_shards=["-80", "80-"])
    assert [(a.task_key, a.shards, a.sources) for a in result] == [
        ("task0_2_1", ["-80"], {"-80": "previous-generation"}),
        ("task1_2_1", ["80-"], {"80-": "previous-generation"}),
    ]
    # table_p_ks survives the migration (Debezium drops it and restarts the copy).
    assert result[0].start.shard_gtids == (ShardGtid(KS, "-80", "g1", COPY),)
    assert result[1].start.shard_gtids == (ShardGtid(KS, "80-", "g2"),)
    worker = resolve_task_start(
        lookup_in(records, NAME),
        server=SERVER,
        keyspace=KS,
        shards=["-80"],
        task_id=0,
        task_count=2,
        gen=1,
        prev_task_count=1,
    )
    assert worker.vgtid == result[0].start and worker.stored is None


def test_scale_up_two_to_four_and_down_to_two() -> None:
    shards = ["-40", "40-80", "80-c0", "c0-"]
    gen1 = debezium_records(
        {"task0_2_1": [("-40", "a"), ("80-c0", "c")], "task1_2_1": [("40-80", "b"), ("c0-", "d")]}
    )
    up = plan(gen1, tasks_max=4, gen=2, prev_task_count=2, current_shards=shards)
    assert [(a.task_key, a.start.to_json()) for a in up] == [
        (f"task{i}_4_2", Vgtid.of(KS, [(s, g)]).to_json())
        for i, (s, g) in enumerate(zip(shards, "abcd", strict=True))
    ]
    # The four tasks then write their own keys; later they advanced.
    gen2 = dict(gen1)
    gen2.update(
        debezium_records(
            {f"task{i}_4_2": [(s, g + "'")] for i, (s, g) in enumerate(zip(shards, "abcd", strict=True))}
        )
    )
    down = plan(gen2, tasks_max=2, gen=3, prev_task_count=4, current_shards=shards)
    assert shapes(down) == [
        ("task0_2_3", ["-40", "80-c0"], Vgtid.of(KS, [("-40", "a'"), ("80-c0", "c'")]).to_json()),
        ("task1_2_3", ["40-80", "c0-"], Vgtid.of(KS, [("40-80", "b'"), ("c0-", "d'")]).to_json()),
    ]
    # Restarting generation 2 later: its own keys win over generation 1.
    again = plan(gen2, tasks_max=4, gen=2, prev_task_count=2, current_shards=shards)
    assert [a.start.shard_gtids[0].gtid for a in again] == ["a'", "b'", "c'", "d'"]
    assert {src for a in again for src in a.sources.values()} == {"current-generation"}


def test_missing_previous_generation_keys_are_named() -> None:
    records = debezium_records({"task0_3_1": [("-40", "a")]})
    with pytest.raises(MissingOffsetsError) as info:
        plan(records, tasks_max=4, gen=2, prev_task_count=3, current_shards=["-40", "40-80", "80-c0", "c0-"])
    assert [str(p) for p in info.value.missing] == [
        "VitessPartition [sourcePartition={server=prefix, task_key=task1_3_1}]",
        "VitessPartition [sourcePartition={server=prefix, task_key=task2_3_1}]",
    ]
    assert str(info.value).startswith(
        "No offset found for VitessPartition [sourcePartition={server=prefix, task_key=task1_3_1}], "
        "VitessPartition [sourcePartition={server=prefix, task_key=task2_3_1}]. Generation 1 with 3 task(s)"
    )
    with pytest.raises(
        MissingOffsetsError,
        match=r"task0_1_0}\] \(nor for VitessPartition \[sourcePartition=\{server=prefix}]\)",
    ):
        resolve_task_start(
            lookup_in({}, NAME),
            server=SERVER,
            keyspace=KS,
            shards=["-80"],
            task_id=0,
            task_count=2,
            gen=1,
            prev_task_count=1,
        )


def test_previous_generation_not_required_once_current_is_complete() -> None:
    # Debezium would fail here although generation 1 can never be used again.
    records = debezium_records({"task0_2_2": [("-80", "x")], "task1_2_2": [("80-", "y")]})
    result = plan(records, tasks_max=2, gen=2, prev_task_count=1, current_shards=["-80", "80-"])
    assert [a.start.shard_gtids[0].gtid for a in result] == ["x", "y"]
    start = resolve_task_start(
        lookup_in(records, NAME),
        server=SERVER,
        keyspace=KS,
        shards=["80-"],
        task_id=1,
        task_count=2,
        gen=2,
        prev_task_count=1,
    )
    assert start.stored is not None and start.vgtid == Vgtid.of(KS, [("80-", "y")])


def test_refuses_to_lose_shards() -> None:
    records = debezium_records({"task0_1_0": [("-40", "a"), ("40-80", "b"), ("80-", "c")]})
    with pytest.raises(ShardLossError) as info:
        plan(records, tasks_max=2, gen=1, prev_task_count=1, current_shards=["-40", "80-"])
    assert str(info.value) == (
        "Previous shards: ['-40', '40-80', '80-'] are a superset of the current shards: ['-40', '80-']. "
        "The positions of ['40-80'] would be lost if we continued."
    )


def test_same_generation_shape_is_refused() -> None:
    records = debezium_records({None: [("-80", "a"), ("80-", "b")]})
    with pytest.raises(
        SameGenerationError, match=r"Previous num\.tasks: 1 and current num\.tasks: 1 are the same"
    ):
        plan(records, tasks_max=1, gen=1, prev_task_count=1, current_shards=["-80", "80-"])


def test_split_while_offline_uses_stored_shards() -> None:
    # Generation 0 stored -80 and 80-; while nobody streamed, -80 was split. The old shards stay
    # in use (VTGate serves them up to the journal) so that nothing between is lost.
    records = debezium_records({"task0_1_0": [("-80", "a"), ("80-", "b")]})
    result = plan(records, tasks_max=2, gen=1, prev_task_count=1, current_shards=["-40", "40-80", "80-"])
    assert [(a.task_key, a.shards) for a in result] == [("task0_2_1", ["-80"]), ("task1_2_1", ["80-"])]
    # Same generation, stored shards no longer exist: every key of it must be present.
    gen1 = debezium_records({"task0_2_1": [("-80", "a2")]})
    with pytest.raises(MissingOffsetsError, match="task1_2_1"):
        plan(
            {**records, **gen1}, tasks_max=2, gen=1, prev_task_count=1, current_shards=["-40", "40-80", "80-"]
        )


def test_configured_start_and_task_own_offset() -> None:
    assert configured_start(KS, ["-80"], "current") == {"-80": ShardGtid(KS, "-80", "current")}
    json_setting = Vgtid.of(KS, [("80-", "g2"), ("-80", "g1")]).to_json()
    assert configured_start(KS, ["-80", "80-"], json_setting) == {
        "-80": ShardGtid(KS, "-80", "g1"),
        "80-": ShardGtid(KS, "80-", "g2"),
    }
    with pytest.raises(MigrationError, match=r"no position for shard\(s\) \['c0-'\]"):
        configured_start(KS, ["-80", "c0-"], json_setting)
    # A task's own offset wins as a whole, even with other shards (it followed a split).
    records = debezium_records({"task0_1_0": [("-40", "p"), ("40-80", "q")]})
    start = resolve_task_start(
        lookup_in(records, NAME), server=SERVER, keyspace=KS, shards=["-80"], task_id=0, task_count=1, gen=0
    )
    assert start.vgtid.shards == ["-40", "40-80"] and start.sources == {"-40": "stored", "40-80": "stored"}
    assert isinstance(start.stored, OffsetValue)
    with pytest.raises(MigrationError, match="must be > 0"):
        plan({}, tasks_max=2, gen=1, prev_task_count=0, current_shards=["-80"])


# --- the operator's generation chain (shardcdc.task.history) ---------------------------------------


def _start(records: dict[bytes, bytes], shards: list[str], **kw: Any) -> Any:
    return resolve_task_start(lookup_in(records, NAME), server=SERVER, keyspace=KS, shards=shards, **kw)


def test_never_started_previous_task_resumes_from_the_generation_before_with_the_chain() -> None:
    # Generation 0: one task streamed both shards. Generation 1: two tasks, but task 1's pod was
    # never scheduled, so task1_2_1 was never written. Generation 2: one task again.
    records = debezium_records({"task0_1_0": [("-80", "a0"), ("80-", "b0")], "task0_2_1": [("-80", "a1")]})
    with pytest.raises(MissingOffsetsError) as info:  # Debezium's rule, without the chain
        _start(records, ["-80", "80-"], task_id=0, task_count=1, gen=2, prev_task_count=2)
    assert [p.task_key for p in info.value.missing] == ["task1_2_1"]
    start = _start(records, ["-80", "80-"], task_id=0, task_count=1, gen=2, prev_task_count=2, chain=[(1, 2), (0, 1)])
    # -80 moved in generation 1; 80- never did, so it is where generation 0 left it.
    assert start.vgtid == Vgtid.of(KS, [("-80", "a1"), ("80-", "b0")])
    assert start.sources == {"-80": "previous-generation", "80-": "generation-0"}
    # Each shard's state travels from the value its position came from (a backfill hold).
    assert {s: v.vgtid.to_json() for s, v in start.inherited.items()} == {
        "-80": Vgtid.of(KS, [("-80", "a1")]).to_json(), "80-": Vgtid.of(KS, [("-80", "a0"), ("80-", "b0")]).to_json()}


def test_never_started_task_of_generation_zero_does_not_block_generation_one() -> None:
    # tasks: 4 on a cluster with room for 3 pods, then scaled to 3: task3_4_0 never existed. Its
    # shard never streamed, so it starts as configured, as that task would have.
    records = debezium_records({f"task{i}_4_0": [(s, f"g{i}")] for i, s in enumerate(["-40", "40-80", "80-c0"])})
    with pytest.raises(MissingOffsetsError):
        _start(records, ["-40", "c0-"], task_id=0, task_count=3, gen=1, prev_task_count=4)
    start = _start(records, ["-40", "c0-"], task_id=0, task_count=3, gen=1, prev_task_count=4, chain=[(0, 4)],
                   vgtid_setting="")
    assert start.vgtid == Vgtid.of(KS, [("-40", "g0"), ("c0-", "")])
    assert start.sources == {"-40": "previous-generation", "c0-": "config"}


def test_chain_takes_each_shard_from_its_newest_generation() -> None:
    records = debezium_records({
        "task0_1_0": [("-40", "g0a"), ("40-80", "g0b"), ("80-", "g0c")],
        "task0_3_1": [("-40", "g1a")],  # tasks 1 and 2 of generation 1 never ran
        "task0_2_2": [("-40", "g2a"), ("80-", "g2c")],  # task 1 (40-80) of generation 2 never ran
    })
    start = _start(records, ["-40", "40-80", "80-"], task_id=0, task_count=1, gen=3, prev_task_count=2,
                   chain=[(2, 2), (1, 3), (0, 1)])
    assert start.vgtid == Vgtid.of(KS, [("-40", "g2a"), ("40-80", "g0b"), ("80-", "g2c")])


def test_chain_stops_at_a_complete_generation_so_an_added_shard_starts_as_configured() -> None:
    # The chain was cut at generation 3, which is incomplete; generation 4 is complete, so a shard
    # it does not hold is new (an explicit shard list grew), not lost.
    records = debezium_records({"task0_2_4": [("-80", "a4")], "task1_2_4": [("80-c0", "b4")],
                                "task0_2_3": [("-80", "a3")]})
    start = _start(records, ["-80", "80-c0", "c0-"], task_id=0, task_count=1, gen=5, prev_task_count=2,
                   chain=[(4, 2), (3, 2)], vgtid_setting="current")
    assert start.vgtid == Vgtid.of(KS, [("-80", "a4"), ("80-c0", "b4"), ("c0-", "current")])


def test_chain_ending_at_an_incomplete_generation_refuses_unfound_shards() -> None:
    # Every generation of the (cut) chain misses a key and 80- is in none: its position may be
    # older still, and starting it from the configuration could skip changes.
    records = debezium_records({"task0_2_4": [("-80", "a4")], "task0_2_3": [("-80", "a3")]})
    with pytest.raises(MissingOffsetsError) as info:
        _start(records, ["-80", "80-"], task_id=0, task_count=1, gen=5, prev_task_count=2, chain=[(4, 2), (3, 2)])
    assert [p.task_key for p in info.value.missing] == ["task1_2_3"]
    assert "shards ['80-'] are in no generation of the recorded chain (4:2, 3:2)" in str(info.value)
    # Found before the end of the chain: not needed.
    records.update(debezium_records({"task1_2_4": [("80-", "b4")]}))
    start = _start(records, ["-80", "80-"], task_id=0, task_count=1, gen=5, prev_task_count=2, chain=[(4, 2), (3, 2)])
    assert start.vgtid == Vgtid.of(KS, [("-80", "a4"), ("80-", "b4")])


def test_one_task_key_format_for_offsets_config_and_operator() -> None:
    """The task key is formatted and parsed in one place (offsets.keys): the worker's configuration,
    the migration's assignments and the operator's status check all go through it."""
    from cdcworker.config.model import TaskIdentity
    from cdcworker.offsets.keys import TaskKey, task_key_name
    from cdcworker.offsets.migration import TaskAssignment

    assert task_key_name(3, 4, 7) == "task3_4_7" == str(TaskKey.parse("task3_4_7"))
    identity = TaskIdentity(per_task=True, task_id=3, task_count=4, tasks_max=4, generation=7,
                            prev_task_count=2, shards=None)
    assert identity.task_key == "task3_4_7"
    assert identity.previous_task_keys() == ("task0_2_6", "task1_2_6")
    assert TaskAssignment(3, 4, 7, [], Vgtid(()), {}).task_key == "task3_4_7"
    with pytest.raises(ValueError, match="not a task key"):
        TaskKey.parse("task3_4")
