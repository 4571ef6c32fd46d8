"""Property-based tests of the parsers of user-written input (issue 28, "Fuzzing the parsers").

Whatever the input, each parser gives a valid result or its own clear error type, never another
exception: signal documents (``SignalError``), stored offset values (``StoredOffsetError``),
manifest files (``ManifestError``) and connector documents (a list of problems).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdcoperator.connectorcheck import validate_connector
from cdcoperator.manifest import ManifestError, parse_documents
from cdcworker.offsets import Vgtid
from cdcworker.offsets.migration import StoredOffsetError, read_stored
from cdcworker.signals import Signal, SignalDispatcher, SignalError, signal_from_kafka, signal_from_row
from cdcworker.signals.document import snapshot_request, stop_collections
from cdcworker.snapshot import SnapshotRequest

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)


def _near(keys: list[str], values: st.SearchStrategy[Any] = json_values) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with (some of) the keys a parser looks for, holding anything."""
    return st.dictionaries(st.sampled_from(keys), values, max_size=len(keys))


SNAPSHOT_KEYS = ["data-collections", "type", "additional-conditions", "additional-condition"]
condition_items = _near(["data-collection", "filter"]) | json_values
snapshot_data = _near(SNAPSHOT_KEYS) | st.fixed_dictionaries(
    {"data-collections": st.lists(st.text(max_size=8), max_size=3) | json_values},
    optional={"additional-conditions": st.lists(condition_items, max_size=3) | json_values,
              "additional-condition": st.text(max_size=20) | json_values,
              "type": st.sampled_from(["incremental", "BLOCKING", "other"]) | json_values})


class _Engine:
    def start(self, request: SnapshotRequest) -> None:
        assert isinstance(request, SnapshotRequest)

    def cancel(self, request_id: str | None = None, data_collections: tuple[str, ...] = ()) -> None:
        assert all(isinstance(c, str) for c in data_collections)


@SETTINGS
@given(snapshot_data)
def test_snapshot_data_gives_a_request_or_a_signal_error(data: dict[str, Any]) -> None:
    try:
        request = snapshot_request("id", data)
    except SignalError:
        return
    assert request.data_collections and all(isinstance(c, str) for c in request.data_collections)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in request.conditions.items())
    assert request.kind in ("incremental", "blocking")


@SETTINGS
@given(st.sampled_from(["execute-snapshot", "stop-snapshot", "log", "other", ""]), snapshot_data | json_values)
def test_the_dispatcher_never_raises(kind: str, data: Any) -> None:
    d = SignalDispatcher(_Engine())
    d.dispatch(Signal("s", kind, data if isinstance(data, dict) else {"data-collections": data}))
    with contextlib.suppress(SignalError):
        stop_collections(data if isinstance(data, dict) else {})


record_bodies = st.fixed_dictionaries({}, optional={"id": json_values, "type": json_values,
                                                    "data": snapshot_data | json_values | st.text(max_size=30),
                                                    "origin": json_values})


@SETTINGS
@given(st.binary(max_size=200) | record_bodies.map(lambda b: json.dumps(b).encode())
       | json_values.map(lambda v: json.dumps(v).encode()))
def test_a_kafka_record_gives_a_signal_or_a_signal_error(value: bytes) -> None:
    try:
        signal = signal_from_kafka(b"p", value, "p", 0, skip_origin="me")
    except SignalError as exc:
        assert "\n" not in str(exc)
        return
    assert signal is None or (isinstance(signal.data, dict) and isinstance(signal.type, str))


@SETTINGS
@given(st.fixed_dictionaries({}, optional={"id": json_values, "type": json_values,
                                           "data": json_values | st.binary(max_size=30) | st.text(max_size=30)}))
def test_a_signal_row_gives_a_signal_or_a_signal_error(row: dict[str, Any]) -> None:
    try:
        signal = signal_from_row(row)
    except SignalError:
        return
    assert isinstance(signal.data, dict)


shard_gtid = _near(["keyspace", "shard", "gtid", "table_p_ks"]) | st.fixed_dictionaries(
    {"keyspace": st.text(max_size=5), "shard": st.text(max_size=5), "gtid": st.text(max_size=10)},
    optional={"table_p_ks": st.lists(_near(["table_name", "lastpk"]) | json_values, max_size=2) | json_values})
vgtid_texts = st.lists(shard_gtid | json_values, max_size=3).map(json.dumps) | json_values.map(json.dumps) | st.text()
offset_values = (st.binary(max_size=200)
                 | st.dictionaries(st.sampled_from(["vgtid", "transaction_id", "x"]), vgtid_texts | json_values,
                                   max_size=3).map(lambda d: json.dumps(d).encode()))


@SETTINGS
@given(offset_values)
def test_a_stored_offset_gives_a_value_or_a_stored_offset_error(data: bytes) -> None:
    try:
        value = read_stored("orders", b'["orders",{"server":"p"}]', data)
    except StoredOffsetError as exc:
        assert "shardcdc offsets reset orders" in str(exc) and "\n" not in str(exc)
        return
    assert isinstance(value.vgtid, Vgtid)


yaml_texts = (st.text(max_size=200)
              | json_values.map(lambda v: yaml.safe_dump(v, default_flow_style=True))
              | st.lists(st.sampled_from(["a: &x [1, 2]", "b: *x", "c: *y", "- !!python/name:os.system", "{", "[",
                                          "d: [*x, *x, *x]", "e: &e {f: *e}", "---", "key: 'v", "\t- x", "? a",
                                          "kind: CdcConnector", "metadata: {name: x}", "spec: [1]", "&z [*z]"]),
                         max_size=8).map("\n".join))


@SETTINGS
@given(yaml_texts.map(lambda t: t.encode()) | st.binary(max_size=100))
def test_a_manifest_gives_documents_or_a_manifest_error(data: bytes) -> None:
    try:
        docs = parse_documents(data, "m.yaml")
    except ManifestError as exc:
        assert str(exc).startswith("m.yaml: ") and "\n" not in str(exc)
        return
    assert isinstance(docs, list)


connector_docs = st.fixed_dictionaries(
    {"kind": st.just("CdcConnector")},
    optional={"apiVersion": st.just("shardcdc.io/v1alpha1") | json_values,
              "metadata": _near(["name", "namespace", "labels"]) | json_values,
              "spec": _near(["source", "kafka", "tasks", "config", "state", "worker"]) | json_values})


@settings(SETTINGS, max_examples=100)  # each runs the CRD's schema and CEL rules
@given(connector_docs)
def test_a_connector_document_gives_a_list_of_problems(doc: dict[str, Any]) -> None:
    problems = validate_connector(doc)
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
