"""snapshot.mode is one enum (cdcworker.config.SnapshotMode) for the worker and the operator."""

from __future__ import annotations

import pytest

from cdcoperator.model import ConnectorResource, SpecError
from cdcworker.config import SnapshotMode, load_config

BASE = {"name": "c", "topic.prefix": "p", "database.hostname": "vtgate", "database.port": "15991",
        "vitess.keyspace": "ks", "bootstrap.servers": "k:9092"}


@pytest.mark.parametrize(("mode", "copies", "start"), [
    ("initial", True, ""), ("initial_only", True, ""), ("never", False, "current"),
])
def test_the_worker_reads_the_mode_as_the_enum(mode: str, copies: bool, start: str) -> None:
    source = load_config([], env={}, overrides={**BASE, "snapshot.mode": mode}).source
    assert source.snapshot_mode is SnapshotMode(mode)
    assert source.snapshot_mode.copies is copies
    assert source.start_gtid == start  # a copy starts at "" (Debezium's getVgtid), else the configured position


def _body(snapshot: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "ks"}},
                     "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}, "snapshot": snapshot}}


def test_the_operator_parses_the_same_enum_and_refuses_other_values_in_one_line() -> None:
    assert ConnectorResource.from_body(_body({})).spec.snapshot.mode is SnapshotMode.INITIAL
    assert ConnectorResource.from_body(_body({"mode": "never"})).spec.snapshot.mode is SnapshotMode.NEVER
    with pytest.raises(SpecError, match=r"^spec\.snapshot\.mode must be one of initial, never, initial_only, got 'always'$"):
        ConnectorResource.from_body(_body({"mode": "always"}))
