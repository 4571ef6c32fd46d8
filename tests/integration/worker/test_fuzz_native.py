"""The native scanner and row encoder under the fuzzer (fuzz/: libFuzzer, ASan, UBSan).

A short run with a fixed seed, from real VTGate test server responses, must find nothing (scan,
Program.encode, Producer.send_rows and tx_begin are all exercised): no
memory error, no undefined behaviour, no difference from upb and the pure-Python encoder
(fuzz/oracle.py). Every finding so far is a file in fuzz/regressions/ that the instrumented target
replays, plus a plain assertion here of what the fix changed. `make fuzz` runs it longer.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.message import DecodeError

from cdcworker.events import EncoderConfig, SourceContext, TablePlan, native
from vitessapi import binlogdata_pb2, vtgate_pb2


def _load_runner() -> ModuleType:
    """fuzz/run.py under its own name (a plain `import run` could meet another module)."""
    path = Path(__file__).resolve().parents[3] / "fuzz" / "run.py"
    spec = importlib.util.spec_from_file_location("shardcdc_fuzz_run", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fuzzrun = _load_runner()

SECONDS = int(os.environ.get("SHARDCDC_FUZZ_SECONDS", "30"))
REGRESSIONS = sorted(fuzzrun.REGRESSIONS.iterdir())
CTX = SourceContext(keyspace="ks", shard="0", commit_seconds=1_700_000_000, vgtid="[]")


@pytest.fixture(autouse=True)
def _native_built() -> None:
    assert native.available(), "the native extension is not built: run `make native`"


def _tail(log: Path) -> str:
    return log.read_text()[-6000:] if log.exists() else "(no log)"


def test_a_short_fuzz_run_finds_nothing(tmp_path: Path) -> None:
    log = tmp_path / "fuzz.log"
    r = fuzzrun.fuzz(SECONDS, seed=1, corpus=tmp_path / "corpus", artifacts=tmp_path / "artifacts", log=log)
    found = sorted(p.name for p in (tmp_path / "artifacts").iterdir())
    assert r.returncode == 0 and not found, (
        f"the fuzzer found {found} (copy it into fuzz/regressions/ and fix the C code):\n{_tail(log)}")
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", log.read_text())
    assert runs and int(runs.group(1)) >= 10 * SECONDS, f"too few inputs ran:\n{_tail(log)}"


def test_the_regression_inputs_pass_the_instrumented_oracle(tmp_path: Path) -> None:
    log = tmp_path / "replay.log"
    r = fuzzrun.replay(REGRESSIONS, log=log)
    assert r.returncode == 0, _tail(log)
    assert log.read_text().count("Executed ") == len(REGRESSIONS) >= 10


def _regression(name: str) -> bytes:
    return (fuzzrun.REGRESSIONS / name).read_bytes()


def _upb_refuses(data: bytes) -> bool:
    try:
        vtgate_pb2.VStreamResponse.FromString(data)
    except DecodeError:
        return True
    return False


@pytest.mark.parametrize("name", ["scan-field-number-zero"])
def test_scan_refuses_what_upb_refuses(name: str) -> None:
    from cdcworker._rowenc import scan  # type: ignore[attr-defined]

    data = _regression(name)
    assert _upb_refuses(data)
    assert scan(data) is None  # the caller lets upb raise


@pytest.mark.parametrize("name", [
    "scan-vevent-keyspace-invalid-utf8", "scan-vevent-gtid-invalid-utf8", "scan-rowevent-keyspace-invalid-utf8",
    "scan-rowevent-table-repeated-invalid-utf8", "scan-row-with-malformed-vgtid",
])
def test_a_row_event_upb_refuses_is_left_to_upb(name: str) -> None:
    """The ROW event's item is the generic (type, start, end): the streaming loop parses its slice,
    and upb raises as it does without the extension (before the fix it streamed the rows)."""
    from cdcworker._rowenc import scan  # type: ignore[attr-defined]

    data = _regression(name)
    assert _upb_refuses(data)
    items = scan(data)
    row = [it for it in items if it[0] == binlogdata_pb2.VEventType.ROW]
    assert len(row) == 1 and len(row[0]) == 3
    with pytest.raises(DecodeError):
        binlogdata_pb2.VEvent.FromString(data[row[0][1] : row[0][2]])


@pytest.mark.parametrize(("name", "error"), [
    ("encode-field-number-zero", DecodeError),
    ("encode-malformed-data-columns", DecodeError),
    ("encode-length-overflow", None),
    ("encode-converter-error-before-malformed-after", DecodeError),
])
def test_the_encoder_falls_back_where_python_raises(name: str, error: type[Exception] | None,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The native program hands these RowChanges to the Python path (encode -> None), which raises
    upb's DecodeError (or encodes them: a length beyond the values) exactly as without the extension."""
    from cdcworker._rowenc import scan  # type: ignore[attr-defined]

    data = _regression(name)
    items = scan(data)
    fe = next(binlogdata_pb2.VEvent.FromString(data[it[1] : it[2]]).field_event
              for it in items if it[0] == binlogdata_pb2.VEventType.FIELD)
    rcs = [rc for it in items if len(it) == 7 for rc in it[6]]
    assert rcs
    cfg = EncoderConfig(logical_name="fz")
    monkeypatch.setenv(native.ENV, "1")
    fast = TablePlan.compile(fe, cfg)
    monkeypatch.setenv(native.ENV, "0")
    slow = TablePlan.compile(fe, cfg)
    assert fast._native is not None
    for rc in rcs:
        assert fast._native.encode(rc) is None
        outcomes = []
        for plan in (fast, slow):
            try:
                outcomes.append(plan.encode_change(rc, CTX, 1))
            except Exception as exc:
                outcomes.append((type(exc), str(exc)))
        assert outcomes[0] == outcomes[1]
        if error is not None:
            assert outcomes[0][0] is error
