"""Configuration problems, collected rather than raised one at a time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HIDDEN = "[hidden]"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the configuration, attached to the property a user has to change."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class ConfigError(ValueError):
    """Every problem found in a configuration, reported as one message."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__(format_problems(self.problems))

    @property
    def messages(self) -> list[str]:
        return [str(p) for p in self.problems]


def format_problems(problems: list[Problem]) -> str:
    count = len(problems)
    head = f"invalid shardcdc configuration: {count} problem{'' if count == 1 else 's'}"
    return "\n".join([head, *(f"  - {p}" for p in problems)])
