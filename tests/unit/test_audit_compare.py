"""The trajectory audit and the paired compare, on hand-built inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from orchestrator.models.result import JobResult, TrialSummary
from orchestrator.report.compare import bootstrap_ci, compare, mcnemar_exact, to_markdown
from orchestrator.tasks.load import load_task
from orchestrator.trial.audit import audit_trajectory, grading_files

EXACT = load_task(ROOT / "tasks/memorybench/mb-exact")
FACT = EXACT.facts[0]


def write(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def tool(kind, args, output="", code=0):
    return {"event": {"kind": kind, "text": "", "tool": {"id": "1", "name": "shell", "args": args,
                                                          "output": output, "err": "", "exit_code": code}}}


RECALL = {"memory_recall": {"hits": [{"id": "fast-check-command"}], "used_chars": 80, "suppressed": 2}}
EMPTY_RECALL = {"memory_recall": {"hits": [], "used_chars": 0, "suppressed": 0}}


def test_markers_before_the_first_recall_with_hits_do_not_count(tmp_path):
    path = write(tmp_path / "t.jsonl", [
        tool("tool_dispatch", "echo make check-fast --tag=MEMKEY-EXACT7Q"),  # a guess, no recall yet
        EMPTY_RECALL,
        {"event": {"kind": "message", "text": "MEMKEY-EXACT7Q"}},  # still no hits
    ])
    audit = audit_trajectory(path, EXACT.facts, ["MEMKEY-EXACT7Q"], markers_in_prefix=False)
    assert audit.markers_used == [] and audit.markers_before_recall == ["MEMKEY-EXACT7Q"]
    assert audit.recall_events == 1 and audit.hits == 0


def test_markers_after_a_recall_with_hits_count_and_stats_add_up(tmp_path):
    path = write(tmp_path / "t.jsonl", [RECALL, RECALL, tool("tool_dispatch", "echo MEMKEY-EXACT7Q > answer.txt")])
    audit = audit_trajectory(path, EXACT.facts, ["MEMKEY-EXACT7Q"], markers_in_prefix=False)
    assert audit.markers_used == ["MEMKEY-EXACT7Q"]
    assert (audit.recall_events, audit.hits, audit.injected_chars, audit.suppressed) == (2, 2, 160, 4)
    assert audit.complete and audit.leaks == []


def test_markers_in_prefix_count_from_the_start(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"event": {"kind": "text", "text": "# MEMKEY-PIN4D"}}])
    audit = audit_trajectory(path, (), ["MEMKEY-PIN4D"], markers_in_prefix=True)
    assert audit.markers_used == ["MEMKEY-PIN4D"]


def test_reading_a_memory_source_file_is_a_leak(tmp_path):
    line = next(ln for ln in FACT.body.splitlines() if len(ln) >= 20)
    path = write(tmp_path / "t.jsonl", [tool("tool_result", f"cat {FACT.relative}", output=line)])
    audit = audit_trajectory(path, EXACT.facts, [], False)
    assert audit.leaks == [f"shell read {FACT.relative}"]


@pytest.mark.parametrize("record", [
    tool("tool_result", f"cat {FACT.relative}", output="No such file or directory", code=1),  # failed
    tool("tool_result", f"cat {FACT.relative}", output="short"),  # no content came back
    tool("tool_result", "cat notes.txt", output=FACT.body),  # content, but not from the source path
])
def test_what_is_not_a_leak(tmp_path, record):
    audit = audit_trajectory(write(tmp_path / "t.jsonl", [record]), EXACT.facts, [], False)
    assert audit.leaks == []


def test_a_malformed_line_makes_the_audit_incomplete(tmp_path):
    path = write(tmp_path / "t.jsonl", [RECALL, "{not json", '{"seq": 3}'])
    audit = audit_trajectory(path, EXACT.facts, [], False)
    assert audit.complete is False and audit.malformed_lines == [2, 3]


def job(name: str, policy: str, outcomes: dict[str, tuple[float, int]], k: int = 1) -> JobResult:
    trials = []
    for key, (reward, recalls) in outcomes.items():
        task, _, attempt = key.partition("#")
        trials.append(TrialSummary(trial_id=key, task=task, attempt=int(attempt or 0), reward=reward,
                                   failure_mode="none", scenario_class=task.split("-")[0],
                                   recall_events=recalls, injected_chars=100 * recalls))
    return JobResult(job=name, condition="c", condition_hash="h", agent="a", policy=policy, k=k,
                     n_trials=len(trials), trials=trials)


ON = job("on", "memory-on", {"a-1#0": (1.0, 1), "a-2#0": (1.0, 1), "b-1#0": (0.0, 1), "b-2#0": (1.0, 1),
                             "c-1#0": (0.0, 1)})
OFF = job("off", "memory-off", {"a-1#0": (0.0, 0), "a-2#0": (1.0, 0), "b-1#0": (1.0, 0), "b-2#0": (0.0, 0),
                                "c-1#0": (0.0, 0)})


def test_compare_counts_match_the_hand_built_pair_and_order_does_not_matter():
    forward, backward = compare(ON, OFF), compare(OFF, ON)
    assert forward == backward
    assert forward.on_job == "on" and forward.paired == 5
    assert forward.helpful == ["a-1#0", "b-2#0"] and forward.harmful == ["b-1#0"]
    assert forward.utility_delta_pp == 20.0  # 3/5 - 2/5
    assert forward.per_class["a"].model_dump() == {"n": 2, "on": 1.0, "off": 0.5, "delta_pp": 50.0}
    assert forward.p_value == pytest.approx(1.0)  # 2 vs 1 discordant
    assert set(forward.model_dump()) >= {"utility_delta_pp", "paired", "helpful", "harmful", "p_value", "ci95"}


def test_compare_with_k_attempts_reports_pass_k_and_flaky_tasks():
    on = job("on", "memory-on", {"t#0": (1.0, 1), "t#1": (0.0, 1), "u#0": (1.0, 1), "u#1": (1.0, 1)}, k=2)
    off = job("off", "memory-off", {"t#0": (0.0, 0), "t#1": (0.0, 0), "u#0": (1.0, 0), "u#1": (0.0, 0)}, k=2)
    stats = compare(off, on).k
    assert stats["on"].model_dump() == {"pass_hat_k": 0.5, "pass_at_k": 1.0, "mean_pass_at_1": 0.75, "flaky": ["t"]}
    assert stats["off"].flaky == ["u"] and stats["off"].pass_hat_k == 0.0


def test_mcnemar_and_bootstrap_numbers():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(8, 0) == pytest.approx(2 / 256)
    assert mcnemar_exact(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    low, high = bootstrap_ci([1] * 8 + [0] * 4)
    assert 0 < low <= 66.67 <= high <= 100
    assert bootstrap_ci([1, 1, 1]) == [100.0, 100.0]


# ---- integrity rules (issue 11) ---------------------------------------------------------
GLOBAL_FACT = "memory/global/x.md"


class _Fact:
    """A global fact whose seeded copy lives in the agent's own state root."""

    relative = GLOBAL_FACT
    source = Path("/host/tasks/t/memory/global/x.md")
    body = "The fallback region for the deploy is eu-west-3 and nothing else.\n"
    text = body


def test_reading_ones_own_seeded_global_fact_is_not_a_leak_but_the_source_is(tmp_path):
    state = "/var/tmp/.s-0123abcd"
    own = tool("tool_result", f"cat {state}/{GLOBAL_FACT}", output=_Fact.body)
    source = tool("tool_result", f"cat /srv/task/{GLOBAL_FACT}", output=_Fact.body)
    audit = audit_trajectory(write(tmp_path / "a.jsonl", [own]), [_Fact], [], False, state_home=state)
    assert audit.leaks == []
    audit = audit_trajectory(write(tmp_path / "b.jsonl", [own, source]), [_Fact], [], False,
                             state_home=state)
    assert audit.leaks == [f"shell read {GLOBAL_FACT}"]


@pytest.mark.parametrize("value", ["lots", -3, True, [1], {"n": 1}, float("nan")])
def test_a_bad_recall_count_makes_the_audit_incomplete_and_never_raises(tmp_path, value):
    record = {"memory_recall": {"hits": [], "used_chars": value}}
    audit = audit_trajectory(write(tmp_path / "t.jsonl", [record]), EXACT.facts, [], False)
    assert audit.complete is False and "not a count" in audit.incomplete_reason
    assert audit.injected_chars == 0


def test_no_trajectory_or_a_cut_one_is_never_a_clean_audit(tmp_path):
    assert audit_trajectory(tmp_path / "absent.jsonl", EXACT.facts, [], False).complete is False
    path = write(tmp_path / "t.jsonl", [RECALL])
    assert audit_trajectory(path, EXACT.facts, [], False).complete is True
    cut = audit_trajectory(path, EXACT.facts, [], False, truncated=True)
    assert cut.complete is False and "cap" in cut.incomplete_reason


def test_compare_leaves_voided_pairs_out_and_says_how_many():
    on, off = ON.model_copy(deep=True), OFF.model_copy(deep=True)
    on.trials[0].failure_mode = "answer_leak"  # a-1#0: was helpful
    on.trials[0].reward = None
    report = compare(on, off)
    assert report.paired == 4 and report.void_pairs_excluded == ["a-1#0"]
    assert report.helpful == ["b-2#0"]
    assert "1 void pair(s) left out: a-1#0" in to_markdown(report)


def test_compare_refuses_arms_that_do_not_differ_and_says_it_plainly():
    from orchestrator.errors import InputError
    from orchestrator.report.compare import verdict

    with pytest.raises(InputError) as info:
        compare(ON, ON)
    assert "nothing differs" in str(info.value)
    report = compare(ON, OFF)
    assert report.arms_differ_in == ["policy"]
    assert verdict(report).startswith("Memory helped on 2 of 5 paired trials and hurt on 1;")
    assert to_markdown(report).splitlines()[2] == verdict(report)


def test_a_deep_json_line_is_skipped_and_counted_and_a_leak_on_another_line_still_voids(tmp_path):
    """Issue 26: one 100,000-deep JSON line used to replace the whole audit (the leak on
    another line was erased and the trial counted 1.0)."""
    line = next(ln for ln in FACT.body.splitlines() if len(ln) >= 20)
    path = write(tmp_path / "t.jsonl", ["[" * 100_000 + "]" * 100_000,
                                        '{"event": {"kind": "text", "text": ' + "9" * 5001 + "}}",
                                        tool("tool_result", f"cat {FACT.relative}", output=line)])
    audit = audit_trajectory(path, EXACT.facts, [], False)
    assert audit.leaks == [f"shell read {FACT.relative}"]
    assert audit.malformed_lines == [1, 2] and not audit.complete


def _grading_task(tmp_path: Path) -> Path:
    task = tmp_path / "leaky"
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "environment").mkdir()
    (task / "instruction.md").write_text("Write the checksum of /app/data.csv to /app/sum.txt.\n")
    (task / "environment/Dockerfile").write_text("FROM debian\nCOPY . /app\n")
    (task / "tests/test_outputs.py").write_text(
        "def test_sum():\n"
        "    expected = '5d41402abc4b2a76b9719d911017c592'\n"
        "    assert open('/app/sum.txt').read().strip() == expected\n")
    (task / "solution/solve.sh").write_text("md5sum /app/data.csv | cut -d' ' -f1 > /app/sum.txt\n")
    return task


def test_the_tests_read_at_another_path_are_a_leak_by_content(tmp_path):
    """An image built with `COPY . /app` ships tests/: reading /app/tests/... is caught by
    what comes back, whatever the path; the solution (one short line) by its whole text."""
    grading = grading_files(_grading_task(tmp_path), with_memory=False)
    test_py = (tmp_path / "leaky/tests/test_outputs.py").read_text()
    path = write(tmp_path / "t.jsonl", [
        tool("tool_result", "cat /tmp/copy-of-something", output=test_py),
        tool("tool_result", "cat /app/s.sh", output="md5sum /app/data.csv | cut -d' ' -f1 > /app/sum.txt\n"),
    ])
    audit = audit_trajectory(path, (), [], False, grading=grading)
    assert audit.leaks == ["a tool's output holds 2 line(s) of tests/test_outputs.py",
                           "a tool's output holds solution/solve.sh"]


def test_what_the_agent_typed_itself_or_the_instruction_says_is_not_a_leak(tmp_path):
    grading = grading_files(_grading_task(tmp_path), with_memory=False)
    solution = "md5sum /app/data.csv | cut -d' ' -f1 > /app/sum.txt"
    path = write(tmp_path / "t.jsonl", [
        tool("tool_dispatch", solution),  # the agent wrote the solution's command itself
        tool("tool_result", solution, output=""),
        tool("tool_result", "cat /app/run.log", output=solution + "\n"),  # and read back its own
        tool("tool_result", "cat /app/README", output="Write the checksum of /app/data.csv to /app/sum.txt.\n"),
        tool("tool_result", "cat /app/tests/test_outputs.py", output="No such file", code=1),  # failed
    ])
    assert audit_trajectory(path, (), [], False, grading=grading).leaks == []


def test_seed_sources_count_by_content_only_in_memory_off(tmp_path):
    """memory-on delivers the facts: any tool may show them. memory-off has none: their
    content anywhere is a leak."""
    off, on = grading_files(EXACT.path, with_memory=True), grading_files(EXACT.path, with_memory=False)
    path = write(tmp_path / "t.jsonl", [tool("tool_result", "cat /srv/x", output=FACT.body)])
    assert any(FACT.relative in leak for leak in audit_trajectory(path, (), [], False, grading=off).leaks)
    assert not any(FACT.relative in leak for leak in audit_trajectory(path, (), [], False, grading=on).leaks)
