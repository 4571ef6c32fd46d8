"""Worker logging: SHARDCDC_LOG_LEVEL / SHARDCDC_LOG_FORMAT, JSON lines with the task context."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from cdcworker.observability import configure_logging


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)


def test_json_lines_carry_context_extras_and_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDCDC_LOG_FORMAT", "json")
    monkeypatch.setenv("SHARDCDC_LOG_LEVEL", "debug")
    out = io.StringIO()
    ctx = configure_logging(context={"connector": "inventory", "task": "task0_2_1"}, stream=out)
    log = logging.getLogger("cdcworker.task")
    log.debug("starting from %s", "-80@MySQL56/x:1-5")
    ctx.set(generation=2)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("stream failed", extra={"grpc_code": "UNAVAILABLE"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    ts = first.pop("ts")
    assert ts.endswith("Z") and len(ts) == len("2024-01-01T00:00:00.000Z")
    assert first == {
        "level": "DEBUG",
        "logger": "cdcworker.task",
        "message": "starting from -80@MySQL56/x:1-5",
        "connector": "inventory",
        "task": "task0_2_1",
    }
    second.pop("ts")
    exception = second.pop("exception")
    assert exception.startswith("Traceback") and exception.endswith("RuntimeError: boom")
    assert second == {
        "level": "ERROR",
        "logger": "cdcworker.task",
        "message": "stream failed",
        "connector": "inventory",
        "task": "task0_2_1",
        "generation": 2,
        "grpc_code": "UNAVAILABLE",
    }


def test_text_format_and_level_filtering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDCDC_LOG_FORMAT", raising=False)
    monkeypatch.setenv("SHARDCDC_LOG_LEVEL", "WARN")
    out = io.StringIO()
    configure_logging(stream=out)
    log = logging.getLogger("cdcworker.sink")
    log.info("hidden")
    log.warning("kafka: %s", "broker down")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(" WARNING cdcworker.sink kafka: broker down")


def test_arguments_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDCDC_LOG_FORMAT", "text")
    out = io.StringIO()
    configure_logging(level="error", fmt="json", stream=out)
    logging.getLogger("x").warning("dropped")
    logging.getLogger("x").error("kept")
    assert [json.loads(line)["message"] for line in out.getvalue().splitlines()] == ["kept"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SHARDCDC_LOG_LEVEL": "loud"}, "SHARDCDC_LOG_LEVEL='LOUD' is not one of"),
        ({"SHARDCDC_LOG_FORMAT": "xml"}, "SHARDCDC_LOG_FORMAT='xml' is not one of text, json"),
    ],
)
def test_bad_settings_are_rejected(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    monkeypatch.delenv("SHARDCDC_LOG_LEVEL", raising=False)
    monkeypatch.delenv("SHARDCDC_LOG_FORMAT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as err:
        configure_logging(stream=io.StringIO())
    assert str(err.value).startswith(message)
