"""Kafka Connect's topic creation settings (KIP-158): ``topic.creation.*`` → creation groups.

As Connect's ``SourceConnectorConfig`` / ``TopicCreationGroup`` define them:

* Topic creation is used when ``topic.creation.enable`` is true and at least one other
  ``topic.creation.*`` setting is given; otherwise the task leaves topics to the broker.
* ``topic.creation.groups`` names groups besides ``default``. A group takes a topic when one of its
  ``include`` regexes matches the whole name and none of its ``exclude`` regexes does (Java
  ``Pattern.matches``: case-sensitive, whole name); the first such group in the list wins, else
  ``default``. A group without ``include`` takes no topic; ``default``'s include/exclude are ignored.
* A group's ``partitions`` and ``replication.factor`` default to the default group's; every other
  ``topic.creation.<group>.<name>`` is a topic-level config of the topics it creates (not inherited).

Connect has no default for ``topic.creation.default.partitions`` / ``.replication.factor``; shardcdc
uses its catalogue defaults instead of refusing, so every configuration Connect accepts means the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from cdcworker.config.errors import Problem
from cdcworker.config.model import TopicCreationGroup

PREFIX = "topic.creation."
DEFAULT_GROUP = "default"
_MATCHING = ("include", "exclude")
_SIZING = ("partitions", "replication.factor")
_INT = re.compile(r"[+-]?\d+")
_SHORT_MAX = 32767  # Connect reads replication.factor as a Java short


def uses_topic_creation(enabled: bool, explicit_keys: set[str]) -> bool:
    return enabled and any(k.startswith(PREFIX) and k != f"{PREFIX}enable" for k in explicit_keys)


def group_settings(family: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``{group: {setting: value}}`` from the ``topic.creation.`` family (the part after the prefix)."""
    out: dict[str, dict[str, str]] = {}
    for rest, value in family.items():
        group, _, setting = rest.partition(".")
        out.setdefault(group, {})[setting] = value
    return out


def problems(
    family: Mapping[str, str], groups: tuple[str, ...], partitions: object, replication_factor: object
) -> tuple[list[Problem], list[str]]:
    """Every problem with the topic creation settings, and warnings for settings Connect ignores."""
    found: list[Problem] = []
    warnings: list[str] = []
    dupes = sorted({g for g in groups if groups.count(g) > 1})
    if dupes:
        found.append(Problem(f"{PREFIX}groups", f"lists {', '.join(dupes)} more than once"))
    for setting, value in (("partitions", partitions), ("replication.factor", replication_factor)):
        if isinstance(value, int) and not _valid_size(setting, value):
            found.append(Problem(f"{PREFIX}{DEFAULT_GROUP}.{setting}", _SIZE_ERRORS[setting]))
    for group, settings in group_settings(family).items():
        for setting, value in settings.items():
            key = f"{PREFIX}{group}.{setting}"
            if not setting:
                found.append(Problem(key, f"expected {PREFIX}<group>.<setting>"))
            elif group == DEFAULT_GROUP:
                if setting in _MATCHING:
                    warnings.append(f"{key} is ignored: the default group takes every topic no other group takes")
            elif group not in groups:
                found.append(Problem(key, f"group {group!r} is not listed in {PREFIX}groups"))
            elif setting in _MATCHING:
                for expr in _regexes(value):
                    try:
                        re.compile(expr)
                    except re.error as exc:
                        found.append(Problem(key, f"{expr!r} is not a valid regular expression: {exc}"))
            elif setting in _SIZING:
                number = int(value) if _INT.fullmatch(value.strip()) else None
                if number is None or not _valid_size(setting, number):
                    found.append(Problem(key, _SIZE_ERRORS[setting]))
    return found, warnings


def build_groups(
    family: Mapping[str, str], groups: tuple[str, ...], partitions: int, replication_factor: int
) -> tuple[TopicCreationGroup, ...]:
    """The named groups in matching order, then ``default`` (which takes every topic)."""
    settings = group_settings(family)
    out = []
    for name in dict.fromkeys(groups):
        if name == DEFAULT_GROUP:
            continue  # Connect: a group named default is replaced by the default group
        s = settings.get(name, {})
        out.append(
            TopicCreationGroup(
                name,
                _pattern(s.get("include")),
                _pattern(s.get("exclude")),
                int(s.get("partitions", partitions)),
                int(s.get("replication.factor", replication_factor)),
                _configs(s),
            )
        )
    default = settings.get(DEFAULT_GROUP, {})
    out.append(TopicCreationGroup(DEFAULT_GROUP, re.compile(".*"), None, partitions, replication_factor, _configs(default)))
    return tuple(out)


# Connect's PARTITIONS_VALIDATOR / REPLICATION_FACTOR_VALIDATOR (a replication factor is a Java short).
_SIZE_ERRORS = {
    "partitions": "number of partitions must be positive, or -1 to use the broker's default",
    "replication.factor": "replication factor must be positive and at most 32767, or -1 to use the broker's default",
}


def _valid_size(setting: str, number: int) -> bool:
    limit = _SHORT_MAX if setting == "replication.factor" else 2_147_483_647
    return number == -1 or 1 <= number <= limit


def _regexes(value: str) -> list[str]:
    """A Connect LIST: comma-separated, trimmed, blanks dropped."""
    return [p.strip() for p in value.split(",") if p.strip()]


def _pattern(value: str | None) -> re.Pattern[str] | None:
    """Connect joins a group's regexes with ``|``; no regex gives a pattern no topic name matches."""
    parts = _regexes(value or "")
    return re.compile("|".join(parts)) if parts else None


def _configs(settings: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType({k: v for k, v in settings.items() if k not in (*_MATCHING, *_SIZING)})
