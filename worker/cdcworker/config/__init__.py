"""Worker configuration: Debezium Vitess property names and defaults, loaded, validated and typed.

Typical use at process start::

    config = load_config_or_exit(["/etc/shardcdc/connector.properties"])

which reads the files, applies ``SHARDCDC_*`` environment overrides, resolves ``${file:...}`` /
``${directory:...}`` / ``${env:...}`` references, validates everything at once and exits with status 2 and one
message listing every problem. See :mod:`cdcworker.config.loader` for sources and
:mod:`cdcworker.config.properties` for the catalogue.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NoReturn

from cdcworker.config.errors import HIDDEN, ConfigError, Problem
from cdcworker.config.loader import ENV_PREFIX, RawConfig, load_raw, property_to_env
from cdcworker.config.model import (
    BehaviourConfig,
    ConverterConfig,
    FilterConfig,
    KafkaConfig,
    Secret,
    SignalConfig,
    SnapshotMode,
    SourceConfig,
    TaskIdentity,
    TlsConfig,
    TopicConfig,
    TopicCreationGroup,
    TransactionConfig,
    Transform,
    TransformConfig,
    WorkerConfig,
)
from cdcworker.config.properties import (
    PATTERN_PROPERTIES,
    PREFIX_FAMILIES,
    PROPERTIES,
    Property,
    PropType,
    operator_owned,
)
from cdcworker.config.validate import validate

log = logging.getLogger(__name__)

EXIT_CONFIG_ERROR = 2

__all__ = [
    "ENV_PREFIX",
    "EXIT_CONFIG_ERROR",
    "HIDDEN",
    "PATTERN_PROPERTIES",
    "PREFIX_FAMILIES",
    "PROPERTIES",
    "BehaviourConfig",
    "ConfigError",
    "ConverterConfig",
    "FilterConfig",
    "KafkaConfig",
    "Problem",
    "PropType",
    "Property",
    "RawConfig",
    "Secret",
    "SignalConfig",
    "SnapshotMode",
    "SourceConfig",
    "TaskIdentity",
    "TlsConfig",
    "TopicConfig",
    "TopicCreationGroup",
    "TransactionConfig",
    "Transform",
    "TransformConfig",
    "WorkerConfig",
    "catalogue",
    "default_string",
    "load_config",
    "load_config_or_exit",
    "operator_owned",
    "property_to_env",
    "validate",
]


def load_config(
    files: Iterable[str | Path] = (),
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> WorkerConfig:
    """Load and validate; raises ConfigError with every problem. `env` defaults to ``os.environ``."""
    files = list(files)
    config = validate(load_raw(files, env=env, overrides=overrides))
    for warning in config.warnings:
        log.warning("configuration: %s", warning)
    log.info(
        "configuration loaded from %s: %s", ", ".join(map(str, files)) or "environment", config.redacted()
    )
    return config


def load_config_or_exit(
    files: Iterable[str | Path] = (),
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> WorkerConfig:
    """As load_config, but print the problems to stderr and exit with status 2 when invalid."""
    try:
        return load_config(files, env=env, overrides=overrides)
    except ConfigError as exc:
        _exit(str(exc))


def _exit(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(EXIT_CONFIG_ERROR)


def default_string(prop: Property) -> str | None:
    """A default as Kafka Connect would print it (booleans lowercase, lists comma-joined)."""
    value = prop.default
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def catalogue() -> list[dict[str, object]]:
    """The property table as plain data, for the operator's CRD and for documentation."""
    rows: list[dict[str, object]] = [
        {
            "name": p.name,
            "type": p.type.value,
            "default": default_string(p),
            "allowed": list(p.allowed),
            "description": p.description,
            "operatorOwned": p.operator_owned,
            "required": p.required,
            "group": p.group,
        }
        for p in PROPERTIES.values()
    ]
    rows.extend(
        {
            "name": pp.example,
            "pattern": pp.pattern.pattern,
            "type": pp.type.value,
            "default": None,
            "allowed": [],
            "description": pp.description,
            "operatorOwned": False,
            "required": False,
            "group": pp.group,
        }
        for pp in PATTERN_PROPERTIES
    )
    rows.extend(
        {
            "name": f.prefix + "*",
            "type": "passthrough",
            "default": None,
            "allowed": [],
            "description": f.description,
            "operatorOwned": False,
            "required": False,
            "group": f.group,
        }
        for f in PREFIX_FAMILIES
    )
    return rows
