"""Reading raw properties: ``.properties``/JSON/YAML files, environment overrides and config providers.

Sources are applied in order, later ones winning: each file given (in order), then the environment, then
explicit overrides (e.g. from the command line). The result is a flat ``str -> str`` map, exactly what a
Kafka Connect worker would hand the Debezium connector, plus where each key came from and which values are
secret (resolved from a config provider).

Environment mapping (Confluent's ``CONNECT_*`` convention with our prefix): strip ``SHARDCDC_``, lowercase,
then ``___`` -> ``_``, ``__`` -> ``-``, ``_`` -> ``.``. So ``SHARDCDC_DATABASE_HOSTNAME`` sets
``database.hostname`` and ``SHARDCDC_VITESS_STOP___ON___RESHARD`` sets ``vitess.stop_on_reshard``. Names are
lowercased, so a transform alias set through the environment must be lowercase.

Config providers follow Kafka's ``${provider:[path:]key}`` syntax: ``${file:/p.properties:key}`` reads one key
of a properties file (Kafka's FileConfigProvider); ``${file:/path/secret}`` reads a whole file (one trailing
newline removed, as Kubernetes secret files usually carry one); ``${directory:/dir:name}`` reads the file
``name`` in ``/dir`` (DirectoryConfigProvider); ``${env:VAR}`` reads an environment variable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from cdcworker.config.errors import Problem

ENV_PREFIX = "SHARDCDC_"
# Environment variables with our prefix that are not properties (read by the CLI and logging setup).
RESERVED_ENV = frozenset(
    {"SHARDCDC_CONFIG", "SHARDCDC_CONFIG_FILE", "SHARDCDC_LOG_LEVEL", "SHARDCDC_LOG_FORMAT"}
)

# Kafka's ConfigTransformer pattern: ${provider:[path:]key}
PROVIDER_PATTERN = re.compile(r"\$\{([^}]*?):(([^}]*?):)?([^}]*?)\}")
KNOWN_PROVIDER_CLASSES = {
    "org.apache.kafka.common.config.provider.FileConfigProvider": "file",
    "org.apache.kafka.common.config.provider.DirectoryConfigProvider": "directory",
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": "env",
}


@dataclass
class RawConfig:
    """Flat raw properties with their origins; `secret_keys` hold values resolved from a provider."""

    values: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    secret_keys: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)  # a provider reference failed; already reported
    problems: list[Problem] = field(default_factory=list)

    def set(self, key: str, value: str, origin: str) -> None:
        self.values[key] = value
        self.origins[key] = origin
        self.secret_keys.discard(key)


# --- Java .properties -------------------------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Java's line terminators only (str.splitlines knows more)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Java's LineReader: skip blanks and comments, join continuation lines (odd trailing backslashes)."""
    lines = _LINE_BREAK.split(text)
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):  # continuation at end of file: the backslash is dropped
            line = line[:-1]
        yield start + 1, line


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2 : i + 6]
            if len(digits) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise ValueError(f"malformed \\uxxxx escape: {s[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped '=', ':' or whitespace; one separator and surrounding blanks skipped."""
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in " \t\f":
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in " \t\f":
            j += 1
    return key, line[j:]


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Parse Java properties text into ``(line, key, value)`` triples, in file order."""
    result = []
    for lineno, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        try:
            result.append((lineno, _unescape(raw_key), _unescape(raw_value)))
        except ValueError as exc:
            raise ValueError(f"line {lineno}: {exc}") from None
    return result


# --- JSON / YAML ----------------------------------------------------------------------------------------------------


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flatten(obj: Mapping[str, object], origin: str, problems: list[Problem]) -> dict[str, str]:
    """Nested mappings become dotted keys; lists become comma-separated strings; nulls are left out."""
    # A Kafka Connect REST payload {"name": ..., "config": {...}} is unwrapped.
    if isinstance(obj.get("config"), Mapping) and set(obj) <= {"name", "config"}:
        config = obj["config"]
        assert isinstance(config, Mapping)
        inner: dict[str, object] = {str(k): v for k, v in config.items()}
        if "name" in obj:
            inner.setdefault("name", obj["name"])
        obj = inner
    out: dict[str, str] = {}

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        if node is None:
            return
        if prefix in out:
            problems.append(
                Problem(prefix, f"set twice in {origin} (as a dotted key and as a nested mapping)")
            )
            return
        if isinstance(node, list):
            if any(isinstance(x, Mapping | list) for x in node):
                problems.append(Problem(prefix, f"a list of scalars is expected in {origin}"))
                return
            out[prefix] = ",".join(_scalar(x) for x in node)
        else:
            out[prefix] = _scalar(node)

    walk("", obj)
    return out


def read_file(path: str | Path, raw: RawConfig) -> None:
    """Merge one configuration file into `raw`; format from the extension (.json, .yaml/.yml, else properties)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raw.problems.append(
            Problem("<file>", f"cannot read configuration file {path}: {exc.strerror or exc}")
        )
        return
    except UnicodeDecodeError as exc:
        raw.problems.append(Problem("<file>", f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                                              f"offset {exc.start}); save it as UTF-8"))
        return
    suffix = path.suffix.lower()
    if suffix in (".json", ".yaml", ".yml"):
        try:
            data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raw.problems.append(Problem("<file>", f"{path} is not valid {suffix[1:].upper()}: {exc}"))
            return
        if data is None:
            return
        if not isinstance(data, Mapping):
            raw.problems.append(Problem("<file>", f"{path} must hold a mapping of properties"))
            return
        for key, value in flatten(data, str(path), raw.problems).items():
            raw.set(key, value, str(path))
        return
    try:
        entries = parse_properties(text)
    except ValueError as exc:
        raw.problems.append(Problem("<file>", f"{path}: {exc}"))
        return
    for lineno, key, value in entries:
        raw.set(key, value, f"{path}:{lineno}")


# --- environment ------------------------------------------------------------------------------------------------------


# Variables of shardcdc's own tooling (caches, test harness, operator, build switches), never worker
# properties. Every SHARDCDC_* name the repository uses must be here or map to a property: a test scans
# the tree, because `make` exports some of them into every worker a test starts.
RESERVED_ENV_PREFIXES = ("SHARDCDC_OPERATOR_",)
RESERVED_ENV_TOOLING = frozenset(
    {
        "SHARDCDC_CACHE",  # Makefile: cache root
        "SHARDCDC_KAFKA_HOME",  # Makefile: the Kafka broker's jars
        "SHARDCDC_KUBE_HOME",  # Makefile: kube-apiserver, etcd, kubectl
        "SHARDCDC_DEBEZIUM_HOME",  # Makefile: Kafka Connect + Debezium for the conformance test
        "SHARDCDC_HELM",  # Makefile: the helm binary
        "SHARDCDC_VITESS_HOME",  # Makefile: the real Vitess binaries and config templates (make vitess)
        "SHARDCDC_VITESS_USER",  # Makefile: the unprivileged user the real-Vitess fixtures run as
        "SHARDCDC_RDKAFKA_H",  # Makefile: librdkafka's rdkafka.h for the native producer's ABI check
        "SHARDCDC_SPARK_CRD",  # Makefile: the spark-operator's SparkApplication CRD (make spark-crd)
        "SHARDCDC_KIND",  # Makefile: the kind binary (make kind, e2e-kind)
        "SHARDCDC_NATIVE",  # 0: pure-Python encoder and producer path; encoder: C encoder, confluent-kafka producer
        "SHARDCDC_PORT_RANGE",  # local mode and the dev kit: where free ports are chosen (cdcoperator.local.ports)
        "SHARDCDC_MALLOC_TUNING",  # 0: glibc's malloc thresholds left as they are (cdcworker.allocator)
        "SHARDCDC_WORKER_IMAGE",  # operator: default worker image
        "SHARDCDC_WORKER_METRICS_ADDRESS",  # operator: the workers' default shardcdc.metrics.address (chart)
        "SHARDCDC_TERMINATION_LOG",  # worker: where the reshard report goes
        "SHARDCDC_WORKER_SUPERVISED",  # worker pods: a finished task waits instead of exiting (exitcodes)
        "SHARDCDC_SPARK_DRIVER",  # sparkSubmit Job: <namespace>:<driver pod> its SIGTERM kills
        "SHARDCDC_SPARK_MASTER",  # sparkSubmit Job: the k8s:// master of that kill
    }
)


def is_reserved_env(name: str) -> bool:
    """True for SHARDCDC_* variables that configure the process or tooling rather than the connector."""
    return name in RESERVED_ENV or name in RESERVED_ENV_TOOLING or name.startswith(RESERVED_ENV_PREFIXES)


def env_to_property(name: str, prefix: str = ENV_PREFIX) -> str:
    rest = name[len(prefix) :].lower()
    return rest.replace("___", "\0").replace("__", "-").replace("_", ".").replace("\0", "_")


def property_to_env(key: str, prefix: str = ENV_PREFIX) -> str:
    return prefix + key.replace("_", "___").replace("-", "__").replace(".", "_").upper()


def read_env(env: Mapping[str, str], raw: RawConfig, prefix: str = ENV_PREFIX) -> None:
    for name in sorted(env):
        if name.startswith(prefix) and not is_reserved_env(name) and len(name) > len(prefix):
            raw.set(env_to_property(name, prefix), env[name], f"environment variable {name}")


# --- config providers -----------------------------------------------------------------------------------------------


class _Providers:
    """Resolves ``${provider:path:key}`` references; file contents are read once per load."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._files: dict[str, str] = {}
        self._props: dict[str, dict[str, str]] = {}

    def _text(self, path: str) -> str:
        if path not in self._files:
            self._files[path] = Path(path).read_text(encoding="utf-8")
        return self._files[path]

    def resolve(self, provider: str, path: str | None, key: str) -> str:
        if provider == "env":
            if path:
                raise LookupError(f"${{env:...}} takes a variable name only, got path {path!r}")
            if key not in self.env:
                raise LookupError(f"environment variable {key} is not set")
            return self.env[key]
        if provider == "file":
            if path is None:  # whole file (shardcdc extension)
                return strip_final_newline(self._read(key))
            if path not in self._props:
                self._props[path] = {k: v for _, k, v in parse_properties(self._read(path))}
            if key not in self._props[path]:
                raise LookupError(f"key {key!r} not found in {path}")
            return self._props[path][key]
        if provider == "directory":
            if path is None:
                raise LookupError("${directory:...} needs a directory and a file name")
            return self._read(str(Path(path) / key))
        raise LookupError(f"unknown config provider {provider!r} (built in: file, directory, env)")

    def _read(self, path: str) -> str:
        try:
            return self._text(path)
        except OSError as exc:
            raise LookupError(f"cannot read {path}: {exc.strerror or exc}") from None


def strip_final_newline(text: str) -> str:
    """A Secret file's value without the one line end ``kubectl create secret --from-file`` keeps."""
    if text.endswith("\r\n"):
        return text[:-2]
    return text[:-1] if text.endswith("\n") else text


def resolve_providers(raw: RawConfig, env: Mapping[str, str]) -> None:
    """Replace provider references in place; resolved values become secret; failures become problems."""
    providers = _Providers(env)
    for key, value in sorted(raw.values.items()):
        if "${" not in value or key.startswith("config.providers"):
            continue
        failures: list[str] = []

        def substitute(match: re.Match[str], failures: list[str] = failures) -> str:
            provider, path, ref = match.group(1), match.group(3), match.group(4)
            try:
                return providers.resolve(provider, path, ref)
            except (LookupError, ValueError) as exc:
                failures.append(str(exc))
                return match.group(0)

        resolved = PROVIDER_PATTERN.sub(substitute, value)
        if resolved == value and not failures:
            continue
        raw.values[key] = resolved
        raw.secret_keys.add(key)
        if failures:
            raw.unresolved.add(key)
        for failure in failures:
            raw.problems.append(Problem(key, f"cannot resolve config provider reference: {failure}"))


def check_provider_declarations(raw: RawConfig) -> None:
    """``config.providers`` declarations are optional; declared ones must use a class we implement."""
    declared = [p.strip() for p in raw.values.get("config.providers", "").split(",") if p.strip()]
    for name in declared:
        cls_key = f"config.providers.{name}.class"
        cls = raw.values.get(cls_key)
        if cls is None:
            raw.problems.append(Problem(cls_key, f"required because config.providers declares {name!r}"))
        elif cls not in KNOWN_PROVIDER_CLASSES:
            raw.problems.append(
                Problem(cls_key, f"{cls!r} is not supported; use one of: {', '.join(KNOWN_PROVIDER_CLASSES)}")
            )
        elif KNOWN_PROVIDER_CLASSES[cls] != name:
            raw.problems.append(
                Problem(
                    cls_key,
                    f"provider {name!r} must be named {KNOWN_PROVIDER_CLASSES[cls]!r} for class {cls}",
                )
            )
    for key in raw.values:
        if key.startswith("config.providers.") and key.endswith(".class"):
            name = key[len("config.providers.") : -len(".class")]
            if name not in declared:
                raw.problems.append(Problem(key, f"provider {name!r} is not listed in config.providers"))


def load_raw(
    files: Iterable[str | Path] = (),
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
    env_prefix: str = ENV_PREFIX,
) -> RawConfig:
    """Read every source into one RawConfig; problems are collected in it, never raised."""
    environ = dict(os.environ) if env is None else dict(env)
    raw = RawConfig()
    for path in files:
        read_file(path, raw)
    read_env(environ, raw, env_prefix)
    for key, value in (overrides or {}).items():
        raw.set(key, value, "override")
    check_provider_declarations(raw)
    resolve_providers(raw, environ)
    return raw
