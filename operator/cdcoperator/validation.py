"""Validate a CdcConnector as the API server would, without one (local mode, ``shardcdc run -f``).

The CRD is the single source: its ``openAPIV3Schema`` (defaults, types, enums, required, bounds,
lengths, patterns, list types, unknown fields) and its CEL ``x-kubernetes-validations`` (through
:mod:`cdcoperator.cel`, with ``oldSelf`` for the transition rules when a previous version
exists). Messages use the API server's wording (``spec.tasks: Invalid value: 5000: spec.tasks in
body should be less than or equal to 1024``, ``spec.state: Unsupported value: "x": supported
values: ...``, ``spec.kafka: Required value``, a rule's ``message``), so a manifest local mode
rejects fails the same way under ``kubectl apply``, and the other way round.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from cdcoperator.cel import CelError, evaluate
from cdcoperator.model import SpecError
from cdcoperator.naming import metadata_name_problems
from cdcworker.jsontypes import JsonList, JsonMapping, JsonObject, JsonValue
from cdcworker.textcut import quote

__all__ = ["CRD_FILE", "apply_defaults", "crd_schema", "validate", "validate_or_raise"]

CRD_FILE = Path(__file__).resolve().parent / "crd" / "shardcdc.io_cdcconnectors.yaml"
Schema = JsonMapping  # an OpenAPI v3 schema of a CRD (JSON)
_MISSING = object()


@lru_cache(maxsize=1)
def crd_schema() -> JsonObject:
    """The served version's ``openAPIV3Schema`` of the CRD shipped in this package."""
    import yaml

    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return dict(version["schema"]["openAPIV3Schema"])


def _fmt(value: object) -> str:
    if isinstance(value, str):
        return quote(value, render=json.dumps)  # an 8 MB value is named by its start and size
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(_type_name(value))


def _type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "null"


def _type_ok(schema: Schema, value: object) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    want = schema.get("type")
    got = _type_name(value)
    return want is None or got == want or (want == "number" and got == "integer")


# --- defaulting (before validation, as the API server does) --------------------------------------------


def apply_defaults(schema: Schema, value: object) -> JsonValue:
    """``value`` with the schema's defaults filled in (a copy; recursive, also inside lists and maps)."""
    if isinstance(value, Mapping) and schema.get("type") == "object":
        out = dict(value)
        for name, sub in (schema.get("properties") or {}).items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
            if name in out:
                out[name] = apply_defaults(sub, out[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            out = {k: apply_defaults(extra, v) if k not in (schema.get("properties") or {}) else v
                   for k, v in out.items()}
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], v) for v in value]
    return value


# --- validation -------------------------------------------------------------------------------------------


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def add(self, path: str, text: str) -> None:
        self.errors.append(f"{path or '<nil>'}: {text}")

    def invalid(self, path: str, value: object, detail: str) -> None:
        self.add(path, f"Invalid value: {_fmt(value)}: {detail}")

    def check(self, schema: Schema, value: object, old: object, path: str) -> None:
        if not _type_ok(schema, value):
            self.add(path, f"Invalid value: {json.dumps(_type_name(value))}: {path} in body must be of type "
                           f"{schema.get('type')}: {json.dumps(_type_name(value))}")
            return
        if value is None:
            return
        self.scalar(schema, value, path)
        if isinstance(value, Mapping):
            self.mapping(schema, value, old if isinstance(old, Mapping) else _MISSING, path)
        elif isinstance(value, list):
            self.array(schema, value, old if isinstance(old, list) else _MISSING, path)
        self.rules(schema, value, old, path)

    def scalar(self, schema: Schema, value: object, path: str) -> None:
        enum = schema.get("enum")
        if enum is not None and value not in enum:
            self.add(path, f"Unsupported value: {_fmt(value)}: supported values: "
                           f"{', '.join(_fmt(e) for e in enum)}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if "maximum" in schema and value > schema["maximum"]:
                self.invalid(path, value, f"{path} in body should be less than or equal to {schema['maximum']}")
            if "minimum" in schema and value < schema["minimum"]:
                self.invalid(path, value, f"{path} in body should be greater than or equal to {schema['minimum']}")
        if isinstance(value, str):
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                self.add(path, f"Too long: may not be more than {schema['maxLength']} bytes")
            if "minLength" in schema and len(value) < schema["minLength"]:
                self.invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
            if "pattern" in schema and re.search(schema["pattern"], value) is None:
                self.invalid(path, value, f"{path} in body should match '{schema['pattern']}'")

    def mapping(self, schema: Schema, value: JsonMapping, old: object, path: str) -> None:
        props: Mapping[str, Schema] = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                self.add(f"{path}.{name}" if path else name, "Required value")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self.add(path, f"Too many: {len(value)}: must have at most {schema['maxProperties']} items")
        extra = schema.get("additionalProperties")
        for name, sub_value in value.items():
            sub_path = f"{path}.{name}" if path else name
            sub_old = old.get(name, _MISSING) if isinstance(old, Mapping) else _MISSING
            if name in props:
                self.check(props[name], sub_value, sub_old, sub_path)
            elif isinstance(extra, Mapping):
                self.check(extra, sub_value, sub_old, sub_path)
            elif props and not schema.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
                self.errors.append(f'unknown field "{sub_path}"')

    def array(self, schema: Schema, value: JsonList, old: JsonValue, path: str) -> None:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.add(path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.invalid(path, value, f"{path} in body should have at least {schema['minItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                # Transition rules inside lists need a correlatable old item; only map-type lists have one.
                self.check(items, item, _MISSING, f"{path}[{i}]")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            seen: JsonList = []
            for i, item in enumerate(value):
                if item in seen:
                    self.add(f"{path}[{i}]", f"Duplicate value: {_fmt(item)}")
                seen.append(item)
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen_keys: JsonList = []
            for i, item in enumerate(value):
                key = {k: item.get(k) for k in keys} if isinstance(item, Mapping) else item
                if key in seen_keys:
                    self.add(f"{path}[{i}]", f"Duplicate value: {json.dumps(key, separators=(',', ':'))}")
                seen_keys.append(key)

    def rules(self, schema: Schema, value: JsonValue, old: JsonValue, path: str) -> None:
        for rule in schema.get("x-kubernetes-validations") or ():
            text = rule["rule"]
            transition = "oldSelf" in text
            if transition and old is _MISSING:
                continue  # transition rules apply to updates only
            variables = {"self": value, **({"oldSelf": old} if transition else {})}
            try:
                ok = evaluate(text, variables)
            except CelError as exc:
                self.invalid(path, _type_name(value), f"{rule.get('message') or text}: evaluation error: {exc}")
                continue
            if ok is not True:
                message = rule.get("message") or f"failed rule: {text}"
                self.add(path, f"Invalid value: {json.dumps(_type_name(value))}: {message}")


def validate(body: JsonMapping, old: JsonMapping | None = None) -> list[str]:
    """Every error the API server would report for ``body`` (an update of ``old`` when given).

    ``metadata`` is checked as the CRD's rules see it (name length) and as the API server checks
    every object's name and namespace (RFC 1123); the rest of ObjectMeta is not modelled here.
    """
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        return [f"metadata: Invalid value: {json.dumps(_type_name(meta))}: metadata in body must be of type object: "
                f"{json.dumps(_type_name(meta))}"]
    schema = crd_schema()
    new = apply_defaults(schema, dict(body))
    before: JsonValue = apply_defaults(schema, dict(old)) if old is not None else _MISSING
    checker = _Checker()
    spec_schema = schema["properties"]["spec"]
    if "spec" not in new:
        checker.add("spec", "Required value")
    else:
        old_spec = before.get("spec", _MISSING) if isinstance(before, Mapping) else _MISSING
        checker.check(spec_schema, new["spec"], old_spec, "spec")
    checker.rules(schema, new, before, "")  # the root's rules (metadata.name)
    return [*metadata_name_problems(meta or {}), *checker.errors]


def validate_or_raise(body: JsonMapping, old: JsonMapping | None = None) -> None:
    """Raise :class:`SpecError` with the API server's message when ``body`` is invalid."""
    errors = validate(body, old)
    if not errors:
        return
    name = (body.get("metadata") or {}).get("name") or ""
    if len(errors) == 1:
        raise SpecError(f'CdcConnector.shardcdc.io "{name}" is invalid: {errors[0]}')
    raise SpecError(f'CdcConnector.shardcdc.io "{name}" is invalid: [{", ".join(errors)}]')
