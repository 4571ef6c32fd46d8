"""Bad manifests: ``shardcdc validate`` and ``shardcdc run`` refuse the same things with clear lines.

Issue 28, cases 3-5: ``run`` started connectors ``validate`` refused (invalid ``spec.config``, a
wrong ``apiVersion``); names such as ``../../escaped`` made ``run`` write outside ``--state-dir``;
unreadable files (not UTF-8, YAML errors, tags, anchor bombs) and misshapen objects gave
tracebacks; an 8 MB value was echoed whole. Each file below gets one clear answer from both
commands (``validate``: 1 invalid, 2 unreadable; ``run``: 2, nothing started), from one loader
(``cdcoperator.manifest``) and one validator (``validate_connector``).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdcoperator.local.cluster import connector_dir
from cdcoperator.model import SpecError
from shardcdc_cli import cli

GOOD: dict[str, Any] = {
    "apiVersion": "shardcdc.io/v1alpha1",
    "kind": "CdcConnector",
    "metadata": {"name": "orders"},
    "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "commerce"}},
             "kafka": {"bootstrapServers": "kafka:9092", "topicPrefix": "orders"}},
}


def _with(path: str, value: Any) -> str:
    doc = copy.deepcopy(GOOD)
    node = doc
    keys = path.split("/")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return yaml.safe_dump(doc)


def _bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n" + yaml.safe_dump({**GOOD, "spec": None}).replace("spec: null", "spec: {config: *i}")


# Case 3: spec.config values the worker refuses, and a foreign apiVersion.
CONFIG_CASES = [
    ("unknown-property", {"no.such.property": "1"}, "no.such.property: unknown property"),
    ("bad-regex", {"table.include.list": "commerce\\.(a"}, "is not a valid regular expression"),
    ("include-and-exclude", {"table.include.list": "commerce\\.a", "table.exclude.list": "commerce\\.b"},
     "table.exclude.list: cannot be used together with table.include.list"),
    ("bad-enum", {"decimal.handling.mode": "bogus"}, "decimal.handling.mode: 'bogus' is not one of"),
    ("wrong-type-interval", {"heartbeat.interval.ms": "soon"}, "heartbeat.interval.ms: 'soon' is not an integer"),
]
# Content problems: validate exits 1 and names them; run exits 2 and starts nothing.
INVALID: list[tuple[str, str, str]] = [
    *[(name, _with("spec/config", config), said) for name, config, said in CONFIG_CASES],
    ("api-version", _with("apiVersion", "shardcdc.io/v9"),
     "apiVersion: expected shardcdc.io/v1alpha1 (the CRD's version), got 'shardcdc.io/v9'"),
    # Case 4: names Kubernetes refuses, which would also lead out of --state-dir.
    ("name-traversal", _with("metadata/name", "../../escaped"),
     'metadata.name: Invalid value: "../../escaped": a lowercase RFC 1123 subdomain must consist of'),
    ("namespace-traversal", _with("metadata/namespace", "../../../ns-escaped"),
     'metadata.namespace: Invalid value: "../../../ns-escaped": a lowercase RFC 1123 label must consist of'),
    ("absolute-name", _with("metadata/name", "/tmp/abs"), 'metadata.name: Invalid value: "/tmp/abs"'),
    ("upper-case-name", _with("metadata/name", "Orders"), 'metadata.name: Invalid value: "Orders"'),
    # Case 5: misshapen objects.
    ("metadata-string", _with("metadata", "x"),
     'metadata: Invalid value: "string": metadata in body must be of type object: "string"'),
    ("spec-list", _with("spec", [1, 2]), 'spec: Invalid value: "array": spec in body must be of type object: "array"'),
    ("name-number", _with("metadata/name", 12), 'metadata.name: Invalid value: "int": must be a string'),
    ("huge-value", _with("spec/config", {"decimal.handling.mode": "x" * 1_000_000}),  # 8 MB alike, quicker to parse
     "decimal.handling.mode: 'xxxxxxxxxx"),
]
# Unreadable files: both exit 2 with one line.
UNREADABLE: list[tuple[str, bytes, str]] = [
    ("not-utf8", yaml.safe_dump(GOOD).encode().replace(b"orders", b"ord\xffers", 1),
     "not UTF-8 text (byte 0xff at offset"),
    ("syntax-error", b"kind: CdcConnector\nmetadata: {name: x\n", "line 3, column 1: expected ',' or '}'"),
    ("undefined-alias", b"kind: CdcConnector\nmetadata: *nope\n", "line 2, column 11: found undefined alias 'nope'"),
    ("python-tag", b"kind: CdcConnector\nmetadata: !!python/object/apply:os.system ['touch /tmp/owned']\n",
     "could not determine a constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system' "
     "(only plain YAML is read: remove the tag)"),
    ("anchor-bomb", _bomb().encode(), "the document expands to more than 100,000 values"),
    ("recursive-alias", b"kind: CdcConnector\nmetadata: &m {name: x, self: *m}\n", "a recursive alias"),
    # Found by test_bad_input_properties: PyYAML's ReaderError spans two lines.
    ("control-character", b"kind: CdcConnector\x1f\n", "character 19: unacceptable character #x001f"),
    ("deep-nesting", b"kind: CdcConnector\nspec: " + b"[" * 1200 + b"]" * 1200 + b"\n", "nested too deeply"),
]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose parent holds nothing: anything written outside the state dir shows."""
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("case", "text", "said"), INVALID, ids=[c for c, _, _ in INVALID])
def test_validate_and_run_refuse_the_same_content(case: str, text: str, said: str, isolated: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    manifest = isolated / "a" / "b" / "c" / "m.yaml"
    manifest.write_text(text)
    before = _files(isolated)
    rc, out, err = _run(capsys, "validate", "-f", str(manifest))
    assert rc == 1, out + err
    assert said in out and "Traceback" not in out + err
    assert all(len(line) < 400 for line in out.splitlines()), "a long value was echoed whole"
    state = isolated / "a" / "b" / "c" / "state"
    # A process with a deadline: a run that starts the connector would not return by itself.
    r = subprocess.run([sys.executable, "-m", "shardcdc_cli.cli", "run", "-f", str(manifest), "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=60, cwd=manifest.parent)
    rc, out, err = r.returncode, r.stdout, r.stderr
    assert rc == 2, out + err
    assert err.startswith(f"shardcdc run: {manifest} CdcConnector/") and "nothing was started" in err
    assert said in err and "Traceback" not in out + err
    assert all(len(line) < 400 for line in err.splitlines())
    assert _files(isolated) == before and not state.exists(), "run wrote files for a connector it refused"


@pytest.mark.parametrize(("case", "data", "said"), UNREADABLE, ids=[c for c, _, _ in UNREADABLE])
def test_validate_and_run_answer_an_unreadable_file_with_one_line(case: str, data: bytes, said: str, isolated: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    manifest = isolated / "m.yaml"
    manifest.write_bytes(data)
    for args in (("validate", "-f", str(manifest)),
                 ("run", "-f", str(manifest), "--state-dir", str(isolated / "state"))):
        rc, out, err = _run(capsys, *args)
        assert rc == 2, out + err
        assert out == ""
        assert err.startswith(f"shardcdc {args[0]}: {manifest}: ") and said in err, err
        assert err.count("\n") == 1, err
    assert not (isolated / "state").exists()
    assert not Path("/tmp/owned").exists()


def test_a_valid_manifest_is_still_valid(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = isolated / "m.yaml"
    manifest.write_text("# a bundle\n---\n" + yaml.safe_dump({"kind": "Namespace", "metadata": {"name": "x"}}) +
                        "---\n" + yaml.safe_dump({**GOOD, "metadata": {"name": "a.b-1", "namespace": "team-1"}}))
    rc, out, _ = _run(capsys, "validate", "-f", str(manifest))
    assert (rc, out.strip()) == (0, f"valid {manifest} CdcConnector/a.b-1")


@pytest.mark.parametrize(("namespace", "name"), [("default", "../x"), ("..", "x"), ("default", "/abs"),
                                                 ("a/b", "x"), ("default", "")])
def test_the_state_directory_refuses_names_that_leave_it(tmp_path: Path, namespace: str, name: str) -> None:
    with pytest.raises(SpecError):
        connector_dir(tmp_path, namespace, name)
    assert connector_dir(tmp_path, "team-1", "a.b-1") == tmp_path / "team-1" / "a.b-1"


def test_validate_answers_a_properties_file_in_another_encoding(isolated: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    props = isolated / "worker.properties"
    props.write_bytes(b"name=orders\ntopic.prefix=caf\xe9\n")  # Latin-1
    rc, out, err = _run(capsys, "validate", "-f", str(props))
    assert rc == 1 and "Traceback" not in out + err
    assert f"<file>: {props} is not UTF-8 text (byte 0xe9 at offset 28); save it as UTF-8" in out
