"""The regression gate's rule on synthetic results: the exact test, the false-discovery
correction over the tasks that could regress, one rule for any k on either side, flaky
baselines, lost attempts, -k auto, how tasks are matched (by name, by content hash), a gate
with nothing to compare refused, and every compared task in regressions.json and JUnit."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from orchestrator.errors import InputError
from orchestrator.models import NOT_GRADED, FailureMode, TrialResult
from orchestrator.report.attempts import attempts_to_tell
from orchestrator.report.gate import gate, one_sided_p
from orchestrator.report.junit import write_junit


def trials(task: str, passes: int, fails: int, layer: str | None = None,
           errors: int = 0, job: str = "j", content: str | None = None) -> list[TrialResult]:
    """`content`: the task's content hash (default: one per task name, as real tasks have)."""
    made = []
    outcomes = [1.0] * passes + [0.0] * fails + [None] * errors
    for attempt, reward in enumerate(outcomes):
        made.append(TrialResult(
            trial_id=f"{task}-{attempt}", job=job, task=task, task_path="/t",
            content_hash=content or f"hash-{task.split('/')[-1]}",
            condition="c", condition_hash="ch", agent="a", attempt=attempt, layer=layer,
            reward=None if reward is None else {"reward": reward},
            failure_mode=FailureMode.INFRA_ERROR if reward is None else FailureMode.NONE))
    return made


def verdicts(result):
    """The tasks the gate judged other than unchanged."""
    return {v.task: (v.verdict, v.gates) for v in result.verdicts if v.verdict != "same"}


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
    assert [v.verdict for v in result.verdicts] == ["same", "ungraded"]  # a is compared: 2/2 -> 2/2


def test_layers_narrow_the_gate_and_bad_options_are_refused():
    base = trials("ds/r", 1, 0, layer="regression") + trials("ds/w", 1, 0, layer="workflow")
    now = trials("ds/r", 0, 1, layer="regression") + trials("ds/w", 0, 1, layer="workflow")
    assert set(verdicts(gate(now, base))) == {"ds/r", "ds/w"}
    assert set(verdicts(gate(now, base, gate_layer="workflow"))) == {"ds/w"}
    with pytest.raises(InputError, match="--flaky"):
        gate(now, base, flaky="sometimes")
    with pytest.raises(InputError, match="--alpha"):
        gate(now, base, alpha=1.5)


def chance_it_gates(base: list[TrialResult], k: int, rate: float) -> float:
    """The chance the gate itself fails task ds/a run k times at this true pass rate, against
    `base`: every outcome of the k attempts through gate(), weighed by its probability."""
    return sum(math.comb(k, a) * rate ** a * (1 - rate) ** (k - a)
               for a in range(k + 1) if gate(trials("ds/a", a, k - a), base).failed)


def test_one_rule_for_any_k_the_plain_rule_only_for_one_attempt_against_one():
    result = gate(trials("ds/a", 19, 1) + trials("ds/b", 0, 20) + trials("ds/c", 0, 1)
                  + trials("ds/d", 0, 1) + trials("ds/e", 20, 0),
                  trials("ds/a", 1, 0) + trials("ds/b", 1, 0) + trials("ds/c", 1, 0)
                  + trials("ds/d", 5, 0) + trials("ds/e", 0, 1))
    by = {v.task: v for v in result.verdicts}
    # 1/1 -> 19/20 was a regression under the old k=1 rule; it is a drop well within chance
    a = by["ds/a"]
    assert (a.verdict, a.gates, a.test, a.p_value) == ("dropped", False, "exact", pytest.approx(20 / 21))
    b = by["ds/b"]  # 1/1 -> 0/20: twenty failures in a row do tell (p = 1/21)
    assert (b.verdict, b.gates, b.test, b.p_value) == ("regressed", True, "exact", pytest.approx(1 / 21))
    c = by["ds/c"]  # 1/1 -> 0/1: the plain rule, and it says one attempt cannot tell
    assert (c.verdict, c.gates, c.test, c.p_value) == ("regressed", True, "one attempt", None)
    assert "one attempt cannot tell" in c.note
    d = by["ds/d"]  # 5/5 -> 0/1 was a regression under the old rule: p = 1/6
    assert (d.verdict, d.gates, d.p_value) == ("dropped", False, pytest.approx(1 / 6))
    e = by["ds/e"]  # 0/1 -> 20/20: an improvement (p = 1/21), never gates
    assert (e.verdict, e.gates, e.p_value) == ("improved", False, pytest.approx(1 / 21))
    assert result.failed and result.regressions == {"-": ["ds/b", "ds/c"]}
    assert "for any k on either side" in result.rule and "only where both sides ran once" in result.rule
    # against one baseline attempt, k = 3 now (what -k auto used to pick): the old rule failed
    # a task that passes 90% of the time 27% of the time; the exact test never fails it
    assert chance_it_gates(trials("ds/a", 1, 0), 3, 0.9) == 0.0
    assert chance_it_gates(trials("ds/a", 1, 0), 1, 0.9) == pytest.approx(0.1)


def test_k_auto_is_honest_about_the_baselines_own_k():
    plan = attempts_to_tell(trials("ds/a", 1, 0), drop=0.5)
    # against one baseline attempt no k up to 20 tells a drop of 0.5 (the old answer was k=3,
    # a 27% false alarm for a 90% task): the baseline's own k, said to be the one-attempt rule
    assert (plan.k, plan.baseline_k, [t.task for t in plan.cannot], plan.one_attempt) == (1, 1, ["ds/a"], ["ds/a"])
    assert plan.baseline_k_needed == 10  # 10 attempts on both sides tell it (power 0.83)
    assert chance_it_gates(trials("ds/a", 10, 0), 10, 0.5) >= 0.8
    assert chance_it_gates(trials("ds/a", 9, 0), 9, 0.5) < 0.8
    plan = attempts_to_tell(trials("ds/a", 1, 0), drop=1.0)  # a task that breaks outright
    assert (plan.k, plan.cannot, plan.one_attempt) == (1, [], ["ds/a"])
    plan = attempts_to_tell(trials("ds/a", 5, 0), drop=1.0)
    assert (plan.k, plan.cannot, plan.one_attempt) == (2, [], [])  # 5/5 -> 0/1 is p = 1/6; 0/2, 1/21
    plan = attempts_to_tell(trials("ds/a", 10, 0), drop=0.5)
    assert plan.k == 10 and plan.cannot == [] and plan.baseline_k_needed is None
    # the k it picks does what it says: the gate catches the drop at least 80% of the time
    assert chance_it_gates(trials("ds/a", 10, 0), plan.k, 0.5) >= 0.8
    assert chance_it_gates(trials("ds/a", 10, 0), plan.k - 1, 0.5) < 0.8
    plan = attempts_to_tell(trials("ds/a", 3, 0) + trials("ds/b", 0, 3), drop=0.5)
    assert [(t.task, str(t.baseline)) for t in plan.cannot] == [("ds/a", "3/3")]  # b never passed
    assert plan.k == 3 and plan.one_attempt == []


def test_a_gate_with_nothing_in_common_is_refused_naming_both_jobs():
    with pytest.raises(InputError) as refused:
        gate(trials("relay-native/a", 1, 0, job="reg"), trials("examples/b", 1, 0, job="tour"))
    message = str(refused.value)
    assert "nothing to compare" in message and "share no task" in message
    assert "job reg (1 task(s): relay-native/a)" in message and "job tour (1 task(s): examples/b)" in message
    with pytest.raises(InputError, match="job jobs/now .* job jobs/base"):
        gate(trials("x/a", 1, 0), trials("y/b", 1, 0), names=("job jobs/now", "job jobs/base"))
    # narrowed by --gate-layer to nothing
    with pytest.raises(InputError, match="--gate-layer: nothing to compare"):
        gate(trials("ds/a", 0, 1), trials("ds/a", 1, 0), gate_layer="regression")
    # a baseline that graded none of the tasks it shares (every attempt an infra error)
    with pytest.raises(InputError, match="graded none of the 1 task"):
        gate(trials("ds/a", 0, 1), trials("ds/a", 0, 0, errors=2))
    # one task left to judge is enough: the others are named as not graded in the baseline
    result = gate(trials("ds/a", 0, 1) + trials("ds/b", 0, 1), trials("ds/a", 0, 0, errors=1) + trials("ds/b", 1, 0))
    assert verdicts(result) == {"ds/a": ("unjudged", False), "ds/b": ("regressed", True)}


def test_a_renamed_dataset_is_matched_by_content_hash_and_says_so():
    base = trials("ds/a", 1, 0) + trials("ds/b", 1, 0) + trials("ds/c", 1, 0)
    now = trials("ds-copy/a", 1, 0) + trials("ds-copy/b", 0, 1) + trials("ds-copy/c", 1, 0)
    result = gate(now, base)
    by = {v.task: v for v in result.verdicts}
    assert {t: (v.verdict, v.matched_by, v.baseline_task) for t, v in by.items()} == {
        "ds-copy/a": ("same", "content hash", "ds/a"), "ds-copy/b": ("regressed", "content hash", "ds/b"),
        "ds-copy/c": ("same", "content hash", "ds/c")}
    assert result.failed and result.matched == {"content hash": 3}
    assert result.only_here == [] and result.only_baseline == []
    assert "regressed (no layer): ds-copy/b  1/1 -> 0/1" in "\n".join(result.lines())
    assert "[matched by content hash to the baseline's ds/b]" in by["ds-copy/b"].line()
    # by name first; a name on one side only is matched by content; two tasks of one side
    # with the same content cannot be told apart and are not matched
    now = trials("ds/a", 1, 0) + trials("new/b", 0, 1) + trials("new/x", 1, 0, content="twin") \
        + trials("new/y", 1, 0, content="twin")
    base = trials("ds/a", 1, 0) + trials("ds/b", 1, 0) + trials("ds/x", 1, 0, content="twin")
    result = gate(now, base)
    assert [(v.task, v.matched_by) for v in result.verdicts] == [("ds/a", "name"), ("new/b", "content hash")]
    assert result.only_here == ["new/x", "new/y"] and result.only_baseline == ["ds/x"]
    # changed content under the same name: refused, or compared and said with --allow-changed
    with pytest.raises(InputError, match="ran different content"):
        gate(trials("ds/a", 0, 1, content="v2"), trials("ds/a", 1, 0, content="v1"))
    changed = gate(trials("ds/a", 0, 1, content="v2"), trials("ds/a", 1, 0, content="v1"), allow_changed=True)
    assert [(v.verdict, v.matched_by) for v in changed.verdicts] == [("regressed", "name only")]


def test_every_compared_task_is_in_regressions_json_and_junit(tmp_path):
    base = trials("ds/same", 1, 0) + trials("ds/broke", 1, 0) + trials("ds/lost", 0, 0, errors=1) \
        + trials("ds/gone", 1, 0)
    now = trials("ds/same", 1, 0) + trials("ds/broke", 0, 1) + trials("ds/lost", 1, 0) \
        + trials("copy/moved", 1, 0, content="hash-moved")
    base += trials("old/moved", 1, 0, content="hash-moved")
    result = gate(now, base)
    written = result.as_dict()
    assert {v["task"]: (v["verdict"], v["gates"], v["matched_by"]) for v in written["tasks"]} == {
        "ds/same": ("same", False, "name"), "ds/broke": ("regressed", True, "name"),
        "ds/lost": ("unjudged", False, "name"), "copy/moved": ("same", False, "content hash")}
    assert written["compared"] == 4 and written["matched"] == {"name": 3, "content hash": 1}
    assert written["only_baseline"] == ["ds/gone"] and written["failed"] is True
    assert written["regressions"] == {"-": ["ds/broke"]} and "testable_tasks" in written
    lines = "\n".join(result.lines())
    assert ("compared 4 task(s) of job j with the baseline job j (matched 3 by name, 1 by content hash): "
            "1 regressed, 2 unchanged, 1 unjudged") in lines
    assert "unchanged: ds/same" in lines and "unchanged (no layer): copy/moved" in lines
    write_junit("j", tmp_path, now, tmp_path / "junit.xml", result)
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    cases = {c.get("name"): c for c in suite.iter("testcase") if c.get("classname") == "orchestra.gate"}
    assert set(cases) == {"ds/same", "ds/broke", "ds/lost", "copy/moved"}

    def facts(case):
        return {p.get("name").removeprefix("orchestra.gate."): p.get("value") for p in case.iter("property")}

    assert facts(cases["copy/moved"]) == {
        "verdict": "same", "gates": "false", "matched_by": "content hash", "baseline_task": "old/moved",
        "test": "one attempt", "baseline": "1/1", "now": "1/1", "p_value": ""}
    assert cases["ds/broke"].find("failure").get("type") == "regressed"
    assert cases["ds/lost"].find("skipped") is not None
    assert cases["ds/same"].find("failure") is None and "same: ds/same" in cases["ds/same"].find("system-out").text
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("8", "2", "1")  # 4 trials + 4 tasks
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["orchestra.gate.compared"] == "4" and props["orchestra.gate.baseline"] == "job j"


def one_attempt(task: str, mode: FailureMode) -> TrialResult:
    """One attempt of `task` that ended in `mode` with reward 0 (None when the machinery lost it)."""
    [made] = trials(task, 0, 1)
    made.failure_mode = mode
    return made


@pytest.mark.parametrize("mode", [m for m in FailureMode if m != FailureMode.NONE])
def test_the_gate_grades_exactly_the_modes_models_failures_says(mode: FailureMode):
    """Every failure mode against a baseline that passed: a graded one regresses (0/1 now), one
    in models/failures.py's NOT_GRADED leaves the task with nothing graded ('ungraded')."""
    result = gate([one_attempt("ds/a", mode)], trials("ds/a", 1, 0))
    [verdict] = result.verdicts
    assert verdict.verdict == ("ungraded" if mode in NOT_GRADED else "regressed")
    assert verdict.gates


def test_the_gate_keeps_no_failure_set_of_its_own():
    import orchestrator.report.gate as gate_module

    assert gate_module.NOT_GRADED is NOT_GRADED  # the one set, not a copy
    assert NOT_GRADED == {FailureMode.INFRA_ERROR, FailureMode.LAUNCH_ERROR, FailureMode.ENDPOINT_ERROR,
                          FailureMode.BUILD_ERROR, FailureMode.CANCELLED, FailureMode.INFEASIBLE}
    own_sets = [name for name, value in vars(gate_module).items()
                if isinstance(value, (set, frozenset)) and value and all(isinstance(v, FailureMode) for v in value)
                and value is not NOT_GRADED]
    assert own_sets == []
