"""What is captured and how: table/column filters, column options, skipped operations, failure modes.

Everything here is decided once per FIELD event (or once per connector): ``FilterPolicy`` plans a
table, ``vstream_rules`` tells VTGate which tables to send, ``FailureHandler`` applies
``event.processing.failure.handling.mode``.
"""

from cdcworker.filters.columns import TYPE_NAME_PARAMETER, FilteredTablePlan, FilterPolicy, FilterStats
from cdcworker.filters.failure import (
    AnonymisedColumns,
    EventConversionError,
    EventLocation,
    FailureHandler,
    is_oversized,
)
from cdcworker.filters.names import adjust_avro, adjust_avro_unicode, adjuster
from cdcworker.filters.tables import ALL_TABLES, TableFilter, complement_regex, vstream_rules

__all__ = [
    "ALL_TABLES",
    "TYPE_NAME_PARAMETER",
    "AnonymisedColumns",
    "EventConversionError",
    "EventLocation",
    "FailureHandler",
    "FilterPolicy",
    "FilterStats",
    "FilteredTablePlan",
    "TableFilter",
    "adjust_avro",
    "adjust_avro_unicode",
    "adjuster",
    "complement_regex",
    "is_oversized",
    "vstream_rules",
]
