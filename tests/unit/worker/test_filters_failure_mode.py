"""event.processing.failure.handling.mode parsed once into FailureMode (cdcworker.filters.failure).

The configuration hands FailureHandler a string; it becomes the enum (Debezium's deprecated
``ignore`` meaning ``skip``), an unknown value is one clear error naming the property, and each
mode does what the connector documents: fail raises naming the offset, warn/skip drop and count.
"""

from __future__ import annotations

import logging

import pytest

from cdcworker.filters.failure import EventConversionError, EventLocation, FailureHandler, FailureMode

WHERE = EventLocation("ks", "-80", "t", '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/u:1-5"}]')


class _Counter:
    def __init__(self) -> None:
        self.erroneous = 0

    def on_erroneous(self, n: int = 1) -> None:
        self.erroneous += n


@pytest.mark.parametrize(("given", "mode"), [
    ("fail", FailureMode.FAIL), ("warn", FailureMode.WARN), ("skip", FailureMode.SKIP),
    ("ignore", FailureMode.SKIP), (FailureMode.WARN, FailureMode.WARN),
])
def test_mode_is_parsed_into_the_enum(given: str, mode: FailureMode) -> None:
    handler = FailureHandler(given)
    assert handler.mode is mode
    assert handler.mode == mode.value  # a StrEnum: status and logs still read the plain word


def test_unknown_mode_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"^unknown event.processing.failure.handling.mode 'drop'$"):
        FailureHandler("drop")


def test_fail_raises_naming_the_offset_and_counts_nothing() -> None:
    counter = _Counter()
    handler = FailureHandler("fail", counter)
    with pytest.raises(EventConversionError, match=r"at offset \{keyspace=ks shard=-80 table=t vgtid=.*: bad row: boom"):
        handler.handle("bad row", WHERE, ValueError("boom"))
    assert (handler.skipped, counter.erroneous) == (0, 0)


@pytest.mark.parametrize(("mode", "level"), [("warn", logging.WARNING), ("skip", logging.DEBUG)])
def test_warn_and_skip_drop_and_count(mode: str, level: int, caplog: pytest.LogCaptureFixture) -> None:
    counter = _Counter()
    handler = FailureHandler(mode, counter)
    with caplog.at_level(logging.DEBUG, logger="cdcworker.filters.failure"):
        handler.handle("bad row", WHERE, ValueError("boom"))
        handler.handle("bad row", WHERE, ValueError("boom"))
    assert (handler.skipped, counter.erroneous) == (2, 2)
    assert [r.levelno for r in caplog.records] == [level, level]
    assert "keyspace=ks shard=-80 table=t" in caplog.records[0].getMessage()
