"""completes_transition, the one-pass form (issue 30: per pod event it is called with every pod of
the connector, so at 1,024 shards the list it used to build each time made a scale O(N²)): it must
decide exactly as the definition does, on any mix of generations, phases and events."""

from __future__ import annotations

import random
from collections.abc import Sequence

from cdcoperator.reconcile import completes_transition
from cdcoperator.taskstatus import PodSummary


def pod(gen: int, task: int, rng: random.Random) -> PodSummary:
    return PodSummary(name=f"c-g{gen}-t{task}", generation=gen, task=task,
                      phase=rng.choice(["Pending", "Running", "Running", "Failed"]), deleting=rng.random() < 0.1,
                      ip="127.0.0.1", port=8080, ready=rng.random() < 0.7, waiting_reason=None, exit_code=None,
                      termination_message="", restarts=0)


def definition(pods: Sequence[PodSummary], changed: PodSummary, deleted: bool) -> bool:
    """The rule as the docstring states it: the index with ``changed`` applied, then the last pod of
    its generation gone (deleted), or all of its generation up and no older generation left."""
    current = [p for p in pods if p.name != changed.name] + ([] if deleted else [changed])
    if deleted:
        return not any(p.generation == changed.generation for p in current)
    mine = [p for p in current if p.generation == changed.generation]
    return (changed.ready and all(p.ready and p.phase == "Running" and not p.deleting for p in mine)
            and not any(p.generation < changed.generation for p in current))


def test_one_pass_decides_as_the_definition_on_random_indexes() -> None:
    rng = random.Random(30)
    decided = {True: 0, False: 0}
    for _ in range(3000):
        pods = [pod(rng.choice([0, 1, 2]), t, rng) for t in range(rng.randint(0, 6))]
        changed = rng.choice(pods) if pods and rng.random() < 0.7 else pod(rng.choice([1, 2]), 9, rng)
        deleted = rng.random() < 0.4
        want = definition(pods, changed, deleted)
        assert completes_transition(iter(pods), changed, deleted) is want, (pods, changed, deleted)
        decided[want] += 1
    assert min(decided.values()) > 100  # both outcomes exercised


def test_with_the_expected_count_a_pod_up_completes_the_start_only_when_it_is_the_last() -> None:
    """Pods are created one by one: the first up, with its siblings not created yet, had every pod
    of its generation (in the index) up, and kicked a reconcile; with the plan's count it does not
    (issue 30: a dozen needless reconciles of ~4 s at 1,024 shards queued before the one that said Ready)."""
    rng = random.Random(31)

    def up(task: int) -> PodSummary:
        return PodSummary(name=f"c-g1-t{task}", generation=1, task=task, phase="Running", deleting=False,
                          ip="127.0.0.1", port=8080, ready=True, waiting_reason=None, exit_code=None,
                          termination_message="", restarts=0)

    order = list(range(5))
    rng.shuffle(order)
    index: list[PodSummary] = []
    kicked = []
    for task in order:
        kicked.append(completes_transition(iter(index), up(task), False, expected=5))
        assert completes_transition(iter(index), up(task), False) is True  # unknown count: as before
        index.append(up(task))
    assert kicked == [False, False, False, False, True]
    # A count for fewer pods than are up (a plan that stopped some) still completes; a drain's last exit
    # does not depend on it.
    assert completes_transition(iter(index[:4]), index[4], False, expected=3)
    assert completes_transition(iter([]), index[0], True, expected=5)
