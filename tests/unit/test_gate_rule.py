"""The regression gate's rule on synthetic results: the exact test, the false-discovery
correction over the tasks that could regress, k = 1, flaky baselines, lost attempts and
-k auto."""

from __future__ import annotations

import pytest

from orchestrator.errors import InputError
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.report.gate import attempts_to_tell, gate, one_sided_p


def trials(task: str, passes: int, fails: int, layer: str | None = None,
           errors: int = 0) -> list[TrialResult]:
    made = []
    outcomes = [1.0] * passes + [0.0] * fails + [None] * errors
    for attempt, reward in enumerate(outcomes):
        made.append(TrialResult(
            trial_id=f"{task}-{attempt}", job="j", task=task, task_path="/t", content_hash="h",
            condition="c", condition_hash="ch", agent="a", attempt=attempt, layer=layer,
            reward=None if reward is None else {"reward": reward},
            failure_mode=FailureMode.INFRA_ERROR if reward is None else FailureMode.NONE))
    return made


def verdicts(result):
    return {v.task: (v.verdict, v.gates) for v in result.verdicts}


def test_the_exact_test_gives_the_hypergeometric_tail():
    assert one_sided_p(0, 5, 5, 5) == pytest.approx(1 / 252)
    assert one_sided_p(2, 5, 3, 5) == pytest.approx(126 / 252)
    assert one_sided_p(0, 1, 1, 1) == 0.5  # one attempt a side can never be significant
    assert one_sided_p(5, 5, 5, 5) == 1.0


def test_a_broken_task_gates_among_a_hundred_stable_ones_and_a_small_drop_does_not():
    base = [t for i in range(100) for t in trials(f"ds/stable{i}", 5, 0)]
    now = [t for i in range(100) for t in trials(f"ds/stable{i}", 5, 0)]
    base += trials("ds/broken", 5, 0) + trials("ds/wobbly", 5, 0)
    now += trials("ds/broken", 0, 5) + trials("ds/wobbly", 3, 2)
    result = gate(now, base)
    # the 100 stable tasks can never reach significance: they do not dilute the correction
    assert result.testable == 1 and result.threshold == 0.05
    assert verdicts(result) == {"ds/broken": ("regressed", True), "ds/wobbly": ("dropped", False)}
    assert result.failed


def test_thirty_tasks_broken_at_once_are_all_named():
    base = [t for i in range(30) for t in trials(f"ds/t{i}", 5, 0)]
    now = [t for i in range(30) for t in trials(f"ds/t{i}", 0, 5)]
    base += [t for i in range(30) for t in trials(f"ds/u{i}", 5, 0)]  # and 30 that drop a little
    now += [t for i in range(30) for t in trials(f"ds/u{i}", 4, 1)]
    result = gate(now, base)
    # a family-wise correction over 30 tasks would need p <= 0.0017, below k = 5's 1/252
    assert result.testable == 30 and result.threshold == pytest.approx(0.05)
    assert sorted(v for v in verdicts(result).values()) == [("dropped", False)] * 30 + [("regressed", True)] * 30


def test_with_one_attempt_the_plain_rule_applies_and_says_it_cannot_tell():
    result = gate(trials("ds/a", 0, 1) + trials("ds/b", 1, 0), trials("ds/a", 1, 0) + trials("ds/b", 0, 1))
    assert verdicts(result) == {"ds/a": ("regressed", True), "ds/b": ("improved", False)}
    assert "one attempt cannot tell" in result.of("regressed")[0].note


def test_a_task_flaky_in_the_baseline_is_reported_and_gates_only_when_asked():
    base, now = trials("ds/f", 4, 1), trials("ds/f", 0, 5)
    assert verdicts(gate(now, base)) == {"ds/f": ("flaky", False)}
    assert verdicts(gate(now, base, flaky="gate")) == {"ds/f": ("flaky", True)}  # p = 5/210
    assert verdicts(gate(now, base, flaky="ignore")) == {}
    assert verdicts(gate(trials("ds/f", 3, 2), base, flaky="gate")) == {"ds/f": ("flaky", False)}


def test_lost_attempts_are_not_graded_and_a_task_with_none_left_gates():
    base = trials("ds/a", 2, 0) + trials("ds/b", 2, 0)
    now = trials("ds/a", 2, 0, errors=3) + trials("ds/b", 0, 0, errors=2)
    result = gate(now, base)
    assert verdicts(result) == {"ds/b": ("ungraded", True)}  # a's infra errors are not fails


def test_layers_narrow_the_gate_and_bad_options_are_refused():
    base = trials("ds/r", 1, 0, layer="regression") + trials("ds/w", 1, 0, layer="workflow")
    now = trials("ds/r", 0, 1, layer="regression") + trials("ds/w", 0, 1, layer="workflow")
    assert set(verdicts(gate(now, base))) == {"ds/r", "ds/w"}
    assert set(verdicts(gate(now, base, gate_layer="workflow"))) == {"ds/w"}
    with pytest.raises(InputError, match="--flaky"):
        gate(now, base, flaky="sometimes")
    with pytest.raises(InputError, match="--alpha"):
        gate(now, base, alpha=1.5)


def test_k_auto_picks_the_fewest_attempts_that_tell_the_drop_and_names_what_cannot():
    assert attempts_to_tell(trials("ds/a", 5, 0), drop=1.0) == (1, [])  # a task that breaks outright
    k, cannot = attempts_to_tell(trials("ds/a", 10, 0), drop=0.5)
    assert 1 < k <= 20 and cannot == []
    k, cannot = attempts_to_tell(trials("ds/a", 3, 0), drop=0.5)
    assert cannot == ["ds/a (3/3 in the baseline)"]
