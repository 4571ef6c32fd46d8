"""Hand-back to Debezium (pure planning): the exact records written for each layout, and that
Debezium's own rules (``plan_tasks`` / ``resolve_task_start`` mirror ``VitessConnector.taskConfigs``
and ``VitessConnectorTask.getConfigWithOffsets``) then start every shard at shardcdc's position,
for every tasks.max, including the task count shardcdc and Debezium had before."""

from __future__ import annotations

import pytest

from cdcworker.offsets import (
    LastPK,
    OffsetPartition,
    OffsetValue,
    PKField,
    PKRow,
    SameGenerationError,
    ShardGtid,
    TableLastPK,
    Vgtid,
    lookup_in,
    offset_record_key,
    plan_tasks,
    resolve_task_start,
)
from cdcworker.offsets.edits import OffsetsError, entries, plan_handback
from cdcworker.offsets.handback import ShardcdcGeneration

NAME = "conn"
SERVER = "pfx"
KS = "ks"
COPY = (TableLastPK("t", LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((7,), b"7"),))),)


def value(*positions: ShardGtid, **extra: object) -> bytes:
    return OffsetValue.build(Vgtid(positions), extra=list(extra.items())).to_bytes()


def key(task_key: str | None) -> bytes:
    return offset_record_key(NAME, OffsetPartition(SERVER, task_key))


def sg(shard: str, gtid: str, copy: bool = False) -> ShardGtid:
    return ShardGtid(KS, shard, gtid, COPY if copy else ())


FOUR = ["-40", "40-80", "80-c0", "c0-"]


def shardcdc_records(gen: int, tasks: int, shards: list[str], *, copy: str | None = None) -> dict[bytes, bytes]:
    """shardcdc's generation ``gen`` with ``tasks`` tasks (round-robin), plus Debezium's older records."""
    records = {key("task0_1_0"): value(*(sg(s, "old:1") for s in shards)),
               key(None): value(*(sg(s, "older:1") for s in shards))}
    for tid in range(tasks):
        mine = shards[tid::tasks]
        records[key(f"task{tid}_{tasks}_{gen}")] = value(*(sg(s, f"new-{s}:9", copy == s) for s in mine))
    return records


def recorded(gen: int, tasks: int, shards: list[str]) -> ShardcdcGeneration:
    return ShardcdcGeneration(gen, tasks, 1, tuple(tuple(shards[t::tasks]) for t in range(tasks)), ((gen - 1, 1),))


def debezium_starts(records: dict[bytes, bytes], settings: dict[str, str], shards: list[str]) -> dict[str, ShardGtid]:
    """Where Debezium's tasks start: taskConfigs, then each task's own offset or the generations."""
    lookup = lookup_in(records, NAME)
    gen, prev = int(settings["vitess.offset.storage.task.key.gen"]), int(settings["vitess.prev.num.tasks"])
    plan = plan_tasks(lookup, server=SERVER, keyspace=KS, tasks_max=int(settings["tasks.max"]), gen=gen,
                      prev_task_count=prev, current_shards=shards)
    out: dict[str, ShardGtid] = {}
    for task in plan:
        start = resolve_task_start(lookup, server=SERVER, keyspace=KS, shards=task.shards, task_id=task.task_id,
                                   task_count=task.task_count, gen=gen, prev_task_count=prev)
        out.update({p.shard: p for p in start.vgtid})
    return out


def apply(records: dict[bytes, bytes], changes: list) -> dict[bytes, bytes]:  # type: ignore[type-arg]
    after = dict(records)
    for ch in changes:
        assert ch.old is None or ch.key == key(None), f"hand-back changed a record it did not write: {ch}"
        after[ch.key] = ch.new
    return after


@pytest.mark.parametrize("shards,shardcdc_tasks", [(["-80", "80-"], 2), (FOUR, 3), (["-"], 1), (FOUR, 4)])
def test_every_tasks_max_resumes_at_shardcdcs_positions(shards: list[str], shardcdc_tasks: int) -> None:
    records = shardcdc_records(5, shardcdc_tasks, shards)
    wanted = {s: sg(s, f"new-{s}:9") for s in shards}
    for tasks_max in range(1, len(shards) + 2):
        changes, handback = plan_handback(records, NAME, SERVER, recorded(5, shardcdc_tasks, shards),
                                          per_task=True, tasks_max=tasks_max)
        settings = dict(handback.settings)
        assert settings["tasks.max"] == str(tasks_max)
        assert settings["vitess.offset.storage.per.task"] == "true"
        after = apply(records, changes)
        assert debezium_starts(after, settings, shards) == wanted, tasks_max
        # What the issue saw: Debezium with its old task count on shardcdc's own generation is refused.
    if shardcdc_tasks > 1:
        with pytest.raises(SameGenerationError):
            debezium_starts(records, {"vitess.offset.storage.task.key.gen": "6", "vitess.prev.num.tasks":
                                      str(shardcdc_tasks), "tasks.max": str(shardcdc_tasks)}, shards)


def test_records_and_settings_for_two_tasks_over_two_shards() -> None:
    shards = ["-80", "80-"]
    records = shardcdc_records(5, 2, shards, copy="80-")
    records[key("task0_2_5")] = value(sg("-80", "new--80:9"), transaction_epoch='{"-80":2}', connector_generation=0)
    records[key("task1_2_5")] = value(sg("80-", "new-80-:9", True), transaction_epoch='{"80-":1}',
                                      connector_generation=0)
    changes, handback = plan_handback(records, NAME, SERVER, recorded(5, 2, shards), per_task=True, tasks_max=2)
    assert dict(handback.settings) == {"vitess.offset.storage.per.task": "true", "vitess.offset.storage.task.key.gen": "7",
                                       "vitess.prev.num.tasks": "1", "tasks.max": "2"}
    assert handback.remove == ()
    a, b = sg("-80", "new--80:9"), sg("80-", "new-80-:9", True)
    # Generation 6: one key (a task count Debezium will not have) with every shard; generation 7: the
    # keys of Debezium's two tasks, each with its shard's whole position (the copy of 80- resumes).
    assert [(ch.key, ch.old, ch.new) for ch in changes] == [
        (key("task0_1_6"), None, value(a, b, transaction_epoch='{"-80":2,"80-":1}', connector_generation=0)),
        (key("task0_2_7"), None, value(a, transaction_epoch='{"-80":2}', connector_generation=0)),
        (key("task1_2_7"), None, value(b, transaction_epoch='{"80-":1}', connector_generation=0)),
    ]
    assert key("task1_2_7") == b'["conn",{"server":"pfx","task_key":"task1_2_7"}]'
    assert debezium_starts(apply(records, changes), dict(handback.settings), shards)["80-"].table_p_ks == COPY


def test_one_task_gets_two_previous_keys() -> None:
    records = shardcdc_records(0, 1, ["-"])
    changes, handback = plan_handback(records, NAME, SERVER, None, per_task=True, tasks_max=1)
    assert [ch.partition.task_key for ch in changes] == ["task0_2_1", "task1_2_1", "task0_1_2"]
    assert dict(handback.settings)["vitess.prev.num.tasks"] == "2"
    assert {ch.new for ch in changes} == {value(sg("-", "new--:9"))}


def test_without_per_task_offsets_the_server_key_holds_every_shard() -> None:
    records = shardcdc_records(5, 2, ["-80", "80-"])
    changes, handback = plan_handback(records, NAME, SERVER, recorded(5, 2, ["-80", "80-"]), per_task=False,
                                      tasks_max=1)
    assert [(ch.key, ch.old, ch.new) for ch in changes] == [
        (key(None), value(sg("-80", "older:1"), sg("80-", "older:1")), value(sg("-80", "new--80:9"), sg("80-", "new-80-:9")))]
    assert handback.settings == (("vitess.offset.storage.per.task", "false"), ("tasks.max", "1"))
    assert handback.remove == ("vitess.offset.storage.task.key.gen", "vitess.prev.num.tasks")
    again, _ = plan_handback(apply(records, changes), NAME, SERVER, recorded(5, 2, ["-80", "80-"]), per_task=False,
                             tasks_max=1)
    assert again == []  # already handed back: nothing to write
    with pytest.raises(OffsetsError, match="one task"):
        plan_handback(records, NAME, SERVER, None, per_task=False, tasks_max=2)


def test_positions_follow_the_recorded_chain_when_a_task_never_stored() -> None:
    # shardcdc generation 5 (2 tasks): task 1 never stored; its shard is where generation 4 had it.
    records = {key("task0_2_5"): value(sg("-80", "g5:3")), key("task0_1_4"): value(sg("-80", "g4:2"), sg("80-", "g4:2"))}
    status = ShardcdcGeneration(5, 2, 1, (("-80",), ("80-",)), ((4, 1),))
    changes, handback = plan_handback(records, NAME, SERVER, status, per_task=True, tasks_max=2)
    starts = debezium_starts(apply(records, changes), dict(handback.settings), ["-80", "80-"])
    assert starts == {"-80": sg("-80", "g5:3"), "80-": sg("80-", "g4:2")}


def test_refusals_are_one_clear_line() -> None:
    with pytest.raises(OffsetsError, match=r"no offsets of server 'pfx' to hand back"):
        plan_handback({}, NAME, SERVER, None, per_task=True, tasks_max=2)
    incomplete = {key("task0_2_3"): value(sg("-80", "x:1"))}
    with pytest.raises(OffsetsError, match=r"No offset found for .*task1_2_3"):
        plan_handback(incomplete, NAME, SERVER, None, per_task=True, tasks_max=2)
    never = ShardcdcGeneration(0, 2, -1, (("-80",), ("80-",)))
    with pytest.raises(OffsetsError, match=r"shard\(s\) \['80-'\] have no stored position"):
        plan_handback(incomplete | {key("task0_2_0"): value(sg("-80", "x:1"))}, NAME, SERVER, never, per_task=True,
                      tasks_max=2)
    assert entries(incomplete, NAME)  # nothing was consumed or changed by the refusals


def test_generations_are_above_shardcdcs_recorded_one_even_before_it_stored() -> None:
    # shardcdc's generation 5 (1 task) never stored: its key task0_1_5 is its own, so the hand-back
    # starts at 6 rather than at the newest stored generation (4) + 1.
    records = {key("task0_1_4"): value(sg("-80", "g4:2"), sg("80-", "g4:2"))}
    status = ShardcdcGeneration(5, 1, 1, (("-80", "80-"),), ((4, 1),))
    changes, handback = plan_handback(records, NAME, SERVER, status, per_task=True, tasks_max=1)
    assert [ch.partition.task_key for ch in changes] == ["task0_2_6", "task1_2_6", "task0_1_7"]
    assert dict(handback.settings)["vitess.offset.storage.task.key.gen"] == "7"
