"""The one polling helper of the test suite: wait on observable state with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float = 30.0, what: str = "condition", period: float = 0.05) -> T:
    """Poll ``fn`` until it returns something truthy (returned); fail with the last value after ``timeout``.

    An ``AssertionError`` raised by ``fn`` counts as "not yet" (its text is shown if time runs out).
    The period is the polling interval of a condition with a deadline, not synchronisation.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
        except AssertionError as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(period)


def eventually(check: Callable[[], None], timeout: float = 30.0, what: str = "the assertions") -> None:
    """Run ``check`` (a block of asserts) until it passes; fail with its last assertion after ``timeout``.

    For state that another process publishes after the one the test waited on: kopf posts a handler's
    Events from a background task, so they can reach the API server after the status, annotation or
    deletion that the same handler wrote.
    """

    def passed() -> bool:
        check()
        return True

    wait_for(passed, timeout, what)
