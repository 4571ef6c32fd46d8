"""The optional native row encoder: a per-table column program run by ``cdcworker._rowenc``.

``program()`` turns a table's converters into a program for the C extension (built by
``make native``; see ``worker/cdcworker/_native/rowenc.c``). Each converter is *recognised*
by identity against the converters ``types.plan_column`` makes for sample columns, so a
converter this module does not know (or one that changed shape) runs as a Python callback
for that column only. The C code has native fast paths for the canonical texts MySQL sends
and hands every other value to the Python converter + orjson, so its bytes equal the
pure-Python path's (tests/unit/worker/test_events_native.py proves it for every type and mode).

A masked column's constant converter (``filters.columns._const_conv``) becomes ``OP_CONST``: the
constant's JSON is written without a Python call per value; a text column cut by
``column.truncate.to.N.chars`` (``_then(text, _java_truncate(N))``) becomes ``OP_TEXT_TRUNC``.

``SHARDCDC_NATIVE=0`` forces the pure-Python path; without the extension it is used anyway.
The same switch decides whether the task reads VStream responses as raw bytes
(``streaming.raw_responses``: the extension's ``scan`` feeds the column programs directly).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cdcworker.events import types as T
from cdcworker.events.jsonfmt import dumps, fix_escapes
from cdcworker.jsontypes import JsonObject, JsonValue

rowenc: Any  # Any: the C extension module (cdcworker._rowenc), None when not built
try:  # imported by name: type-checks the same whether or not the extension is built
    rowenc = importlib.import_module("cdcworker._rowenc")
except ImportError:  # not built (pure-Python install): the Python path is complete on its own
    rowenc = None

ENV = "SHARDCDC_NATIVE"


def available() -> bool:
    """The extension is importable (whatever the environment says)."""
    return rowenc is not None


def enabled() -> bool:
    """Plans compiled now use the native encoder."""
    return rowenc is not None and os.environ.get(ENV, "1") != "0"


@dataclass
class _Field:
    name: str
    type: int
    flags: int = 0
    decimals: int = 0
    column_length: int = 0
    column_type: str = ""


def _sample(t: int, column_type: str = "", flags: int = 0, decimals: int = 0, enum_strings: bool = True, **opts: str) -> Any:  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)
    codec = T.plan_column(_Field("c", t, flags, decimals, 0, column_type), enum_strings, T.TypeOptions(**opts))  # type: ignore[arg-type]
    return None if codec is None else codec.convert


def _identity(conv: object) -> JsonValue:
    # Closures made by one `def`/`lambda` share a code object; builtins (int) are themselves.
    return getattr(conv, "__code__", conv)


def _samples() -> dict[Any, str]:  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)
    """Converter identity -> op name, from sample columns of every type and mode."""
    nn = T.NOT_NULL_FLAG
    pairs = [
        (_sample(T.INT32), "OP_INT"),
        (_sample(T.YEAR), "OP_INT"),
        (_sample(T.UINT64, bigint_unsigned_handling_mode="long"), "OP_INT"),
        (_sample(T.UINT64, flags=nn, bigint_unsigned_handling_mode="long"), "OP_INT"),
        (_sample(T.UINT64, bigint_unsigned_handling_mode="precise"), "OP_DEC_B64"),
        (_sample(T.VARCHAR), "OP_TEXT"),
        (_sample(T.FLOAT32), "OP_F32"),
        (_sample(T.FLOAT64), "OP_F64"),
        (_sample(T.BLOB, "blob", binary_handling_mode="bytes"), "OP_B64"),
        (_sample(T.BLOB, "blob", binary_handling_mode="base64"), "OP_B64"),
        (_sample(T.BLOB, "blob", binary_handling_mode="base64-url-safe"), "OP_B64URL"),
        (_sample(T.BLOB, "blob", binary_handling_mode="hex"), "OP_HEX"),
        (_sample(T.BIT, "bit(1)"), "OP_BOOL"),
        (_sample(T.ENUM, "enum('a')", enum_strings=False), "OP_ENUM"),
        (_sample(T.SET, "set('a')", enum_strings=False), "OP_SET"),
        (_sample(T.DATE), "OP_DATE"),
        (_sample(T.DATE, flags=nn), "ZERO_AWARE"),
        (_sample(T.DATETIME, decimals=6), "OP_DATETIME"),
        (_sample(T.TIME), "OP_TIME_MICRO"),
        (_sample(T.TIME, time_precision_mode="connect"), "OP_TIME_CONNECT"),
        (_sample(T.TIME, flags=nn, time_precision_mode="connect"), "OP_TIME_CONNECT"),
    ]
    out: dict[Any, str] = {}  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)
    for conv, op in pairs:
        if conv is None:
            continue
        key = _identity(conv)
        out[key] = op if out.get(key, op) == op else "OP_PY"  # ambiguous: never guess
    return out


_OPS: dict[Any, str] = _samples() if rowenc is not None else {}  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)


def _cells(conv: object) -> JsonObject:
    code = getattr(conv, "__code__", None)
    closure = getattr(conv, "__closure__", None) or ()
    if code is None:
        return {}
    return {name: cell.cell_contents for name, cell in zip(code.co_freevars, closure, strict=False)}


def _label(text: object) -> bytes:
    return dumps(str(text))[1:-1]


def _filter_codes() -> tuple[Any, Any, Any]:  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)
    # filters.columns imports this module: look its column-option converters up lazily.
    from cdcworker.filters import columns

    return columns.converter_codes()


def _filter_op(conv: object) -> tuple[str, int, tuple[bytes, ...]] | None:
    """A column option's converter the C loop runs itself: a masked column's constant (OP_CONST
    with the constant's JSON) or a truncated text column (OP_TEXT_TRUNC, the length as divisor)."""
    code = getattr(conv, "__code__", None)
    const, then, truncate = _filter_codes()
    cells = _cells(conv)
    if code is const:
        value = cells.get("value")
        return ("OP_CONST", 1, (fix_escapes(orjson.dumps(value)),)) if type(value) is str else None
    if code is then:
        first, cut = cells.get("first"), cells.get("then")
        n = _cells(cut).get("n")
        if getattr(cut, "__code__", None) is truncate and type(n) is int and n > 0 and column_op(first)[0] == "OP_TEXT":
            return "OP_TEXT_TRUNC", n, ()
    return None


def column_op(conv: Callable[[bytes], JsonValue] | None) -> tuple[str, int, tuple[bytes, ...]]:
    """(op name, datetime divisor, escaped labels) for one converter; OP_PY when unknown."""
    if conv is None:
        return "OP_DROP", 1, ()
    op = _OPS.get(_identity(conv), "OP_PY")
    if op == "OP_PY" and (mapped := _filter_op(conv)) is not None:
        return mapped
    if op == "ZERO_AWARE":
        # fn(raw) or 0: the native fast paths only produce real dates, for which `or 0` is a no-op.
        inner = _cells(conv).get("fn")
        op, div, _ = column_op(inner) if inner is not None else ("OP_PY", 1, ())
        return (op, div, ()) if op in ("OP_DATE", "OP_DATETIME") else ("OP_PY", 1, ())
    if op == "OP_DATETIME":
        defaults = getattr(conv, "__defaults__", None)
        if isinstance(defaults, tuple) and len(defaults) == 1 and type(defaults[0]) is int and defaults[0] > 0:
            return op, defaults[0], ()
        return "OP_PY", 1, ()
    if op == "OP_ENUM":
        table = _cells(conv).get("table")
        if isinstance(table, dict) and list(table) == list(range(1, len(table) + 1)):
            return op, 1, tuple(_label(v) for v in table.values())
        return "OP_PY", 1, ()
    if op == "OP_SET":
        labels = _cells(conv).get("labels")
        if isinstance(labels, list) and len(labels) <= 64:
            return op, 1, tuple(_label(v) for v in labels)
        return "OP_PY", 1, ()
    return op, 1, ()


def program(
    names: Sequence[str | None],
    convs: Sequence[Callable[[bytes], JsonValue] | None],
    key_indexes: Sequence[int],
    key_prefix: bytes,
) -> Any:  # Any: objects of the optional C extension cdcworker._rowenc (no type stubs)
    """A compiled ``rowenc.Program`` for one table, or None (extension absent or disabled).

    ``names``/``convs`` per FIELD column (None: dropped column); ``key_indexes`` as
    ``select_key_columns`` returned them. The program's ``encode(RowChange bytes)`` returns
    (before image, after image, before key record, after key record) or None, meaning "use
    the Python path" (malformed input or a column count that does not match the FIELD).
    """
    if not enabled():
        return None
    kept = [n for n in names if n is not None]
    if len(set(kept)) != len(kept):
        return None  # a dict would merge duplicate names; leave that to the Python path
    assert rowenc is not None
    cols = []
    for name, conv in zip(names, convs, strict=True):
        op, div, labels = column_op(conv)
        cols.append((getattr(rowenc, op), dumps(name) + b":" if name is not None else b"", conv, div, labels))
    keys = [i for i in key_indexes if convs[i] is not None]
    return rowenc.Program(cols, keys, key_prefix, orjson.dumps, fix_escapes)


def column_ops(convs: Sequence[Callable[[bytes], JsonValue] | None]) -> list[str]:
    """Op names the columns would run with (diagnostics and tests)."""
    return [column_op(c)[0] for c in convs]
