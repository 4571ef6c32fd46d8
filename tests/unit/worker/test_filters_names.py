"""schema.name.adjustment.mode / field.name.adjustment.mode (cdcworker.filters.names.NameAdjustment).

Each mode picks Debezium's SchemaNameAdjuster behaviour; an unknown mode is one clear error that
lists the valid ones.
"""

from __future__ import annotations

import pytest

from cdcworker.filters.names import MODES, NameAdjustment, adjuster


@pytest.mark.parametrize(("mode", "name", "adjusted"), [
    ("avro", "1a-b_c.d", "_a_b_c.d"),
    ("avro_unicode", "1a-b_c.d", "_u0031a_u002db_u005fc.d"),
    (NameAdjustment.AVRO, "a-b", "a_b"),
])
def test_each_mode_adjusts_as_debezium(mode: str, name: str, adjusted: str) -> None:
    rename = adjuster(mode)
    assert rename is not None
    assert rename(name) == adjusted


def test_none_leaves_names_unchanged() -> None:
    assert adjuster("none") is None
    assert adjuster(NameAdjustment.NONE) is None


def test_unknown_mode_lists_the_valid_ones() -> None:
    assert MODES == ("none", "avro", "avro_unicode")
    with pytest.raises(ValueError, match=r"^unknown name adjustment mode 'avro2' \(expected one of none, avro, avro_unicode\)$"):
        adjuster("avro2")
