"""docs/configuration.md is generated from the property catalogue and the CRD: it must be current and complete."""

from __future__ import annotations

import yaml

from cdcworker.config import reference
from cdcworker.config.properties import PATTERN_PROPERTIES, PREFIX_FAMILIES, PROPERTIES


def test_configuration_reference_is_current() -> None:
    on_disk = reference.DOC_PATH.read_text()
    assert on_disk == reference.render(), "docs/configuration.md is stale: run `make docs`"


def test_reference_lists_every_property_and_family() -> None:
    text = reference.render()
    missing = [name for name in PROPERTIES if f"| `{name}` |" not in text]
    missing += [p.example for p in PATTERN_PROPERTIES if f"`{p.example}`" not in text]
    missing += [f.prefix for f in PREFIX_FAMILIES if f"`{f.prefix}*`" not in text]
    assert missing == []


def test_reference_lists_every_crd_field_with_its_description() -> None:
    crd = yaml.safe_load(reference.CRD_PATH.read_text())
    schema = next(v for v in crd["spec"]["versions"] if v.get("storage"))["schema"]["openAPIV3Schema"]
    text = reference.render()

    def fields(node: dict, path: str):  # type: ignore[no-untyped-def]
        for name, child in (node.get("properties") or {}).items():
            yield f"{path}.{name}", child.get("description", "")
            nested = child.get("items") if child.get("type") == "array" else child
            if nested and nested.get("properties"):
                yield from fields(nested, f"{path}.{name}" + ("[]" if child.get("type") == "array" else ""))

    field_tables = text.split("### Validation rules (CEL)")[0]
    rows = {line.split("`")[1]: line for line in field_tables.splitlines() if line.startswith(("| `spec", "| `status"))}
    for top in ("spec", "status"):
        for path, description in fields(schema["properties"][top], top):
            assert path in rows, f"{path} missing from the reference"
            assert " ".join(description.split())[:40].replace("|", "\\|") in rows[path], path
    assert "Validation rules (CEL)" in text
