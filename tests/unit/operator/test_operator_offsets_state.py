"""cdcoperator.offsets.stopped_problem reads spec.state through the State enum.

Offsets may be changed only when spec.state is stopped (an absent state means running), the
operator has observed it and every worker has exited; the refusal names the state as the user
wrote it.
"""

from __future__ import annotations

from typing import Any

import pytest

from cdcoperator.offsets import stopped_problem


def _body(state: str | None, observed: int = 3, assignment: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {} if state is None else {"state": state}
    return {"spec": spec, "metadata": {"generation": 3}, "status": {"observedGeneration": observed, "assignment": assignment}}


@pytest.mark.parametrize(("state", "shown"), [(None, "'running'"), ("running", "'running'"), ("paused", "'paused'")])
def test_not_stopped_is_refused_naming_the_state(state: str | None, shown: str) -> None:
    problem = stopped_problem(_body(state), how_to_stop="set spec.state: stopped")
    assert problem == f"spec.state is {shown}; set spec.state: stopped"


def test_stopped_observed_and_exited_is_allowed() -> None:
    assert stopped_problem(_body("stopped", assignment={"phase": "Stopped", "stoppedCleanly": True, "generation": 2})) is None


def test_stopped_but_not_observed_waits() -> None:
    assert "not yet observed" in (stopped_problem(_body("stopped", observed=2)) or "")
