"""The regression gate for release pipelines, on jobs made by real runs: a Harbor-format
dataset with no layers, k = 1 and k = 5 on both sides, flaky tasks, output that pipes, every
compared task in regressions.json and JUnit, a gate with nothing to compare refused (exit 2),
a renamed dataset matched by content hash, mixed k (one rule; -k auto against a k=1
baseline), and orchestra crashing as exit 70, never 1."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import make_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
TASKS = ("alpha", "beta", "gamma", "delta")


def orchestra(*args, env=None):
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=900)


def release(root: Path, name: str, fails: dict[str, set[int]]) -> Path:
    """An agent release: a command agent that does each task (writes /app/ok) except on the
    attempts `fails` names for it, read from the task's instruction and ORCHESTRA_ATTEMPT."""
    cases = " ".join(f'{task}:[{"".join(map(str, sorted(attempts)))}]) ;;'
                     for task, attempts in fails.items() if attempts)
    command = ('t=$(sed -n "s/^Do the \\(.*\\) thing.$/\\1/p" {instruction_file}); '
               f'case "$t:$ORCHESTRA_ATTEMPT" in {cases} *) touch /app/ok ;; esac')
    path = root / f"{name}.yaml"
    path.write_text("schema_version: 1\ncondition: " + name + "\nroster:\n  - id: lead\n"
                    "    kind: orchestrator\n    role: solver\n    agent: command\n"
                    f"    command: {json.dumps(command)}\n")
    return path


def dataset(root: Path, tasks: tuple[str, ...] = TASKS, name: str = "ds") -> Path:
    for task in tasks:  # Harbor's shape: no [metadata], so no evaluation layer
        make_task(root / name, task, toml="[agent]\ntimeout_sec = 60\n")
    return root / name


def gate_cases(junit: Path) -> dict[str, dict[str, str]]:
    """The JUnit file's gate testcases: task -> its orchestra.gate.* properties."""
    cases = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("classname") == "orchestra.gate"]
    return {c.get("name"): {p.get("name").removeprefix("orchestra.gate."): p.get("value")
                            for p in c.iter("property")} for c in cases}


def test_a_dataset_with_no_layers_fails_the_gate_when_one_task_breaks(tmp_path):
    ds, jobs = dataset(tmp_path), tmp_path / "jobs"
    good, broken = release(tmp_path, "v1", {}), release(tmp_path, "v2", {"beta": {0}})
    common = ["--path", str(ds), "-k", "1", "--jobs-dir", str(jobs), "-q"]
    assert orchestra("run", *common, "--manifest", str(good), "--job-name", "base").returncode == 0
    same = orchestra("run", *common, "--manifest", str(good), "--job-name", "same",
                     "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no regressions" in same.stdout and "gate: every task both jobs ran" in same.stdout
    gated = orchestra("run", *common, "--manifest", str(broken), "--job-name", "gated",
                      "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "regressed (no layer): ds/beta  1/1 -> 0/1" in gated.stdout
    assert "one attempt cannot tell" in gated.stdout
    verdicts = json.loads((jobs / "gated/regressions.json").read_text())
    assert verdicts["failed"] is True and verdicts["regressions"] == {"-": ["ds/beta"]}
    # every compared task is there, the unchanged ones too, with how it was matched
    assert {v["task"]: (v["verdict"], v["gates"], v["matched_by"], v["test"]) for v in verdicts["tasks"]} == {
        "ds/alpha": ("same", False, "name", "one attempt"), "ds/beta": ("regressed", True, "name", "one attempt"),
        "ds/gamma": ("same", False, "name", "one attempt"), "ds/delta": ("same", False, "name", "one attempt")}
    assert verdicts["compared"] == 4 and verdicts["matched"] == {"name": 4}
    assert "compared 4 task(s) of job " in gated.stdout and "1 regressed, 3 unchanged" in gated.stdout
    # the same verdict from `orchestra report`, with the rule in the JUnit file
    report = orchestra("report", str(jobs / "gated"), "--baseline", str(jobs / "base"),
                       "--fail-on-regression", "--junit", str(tmp_path / "junit.xml"))
    assert report.returncode == 1 and "regressed (no layer): ds/beta" in report.stdout
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="orchestra.gate.rule"' in junit and "REGRESSION (ds/beta  1/1 -&gt; 0/1" in junit
    cases = gate_cases(tmp_path / "junit.xml")  # one testcase per compared task, verdict and match
    assert {task: (c["verdict"], c["gates"], c["matched_by"]) for task, c in cases.items()} == {
        "ds/alpha": ("same", "false", "name"), "ds/beta": ("regressed", "true", "name"),
        "ds/gamma": ("same", "false", "name"), "ds/delta": ("same", "false", "name")}
    assert (cases["ds/beta"]["baseline"], cases["ds/beta"]["now"]) == ("1/1", "0/1")
    # narrowed to a layer none of these tasks has: nothing to compare, so no pass (exit 2)
    narrowed = orchestra("report", str(jobs / "gated"), "--baseline", str(jobs / "base"),
                         "--fail-on-regression", "--gate-layer", "regression")
    assert narrowed.returncode == 2, narrowed.stdout + narrowed.stderr
    assert "--gate-layer: nothing to compare" in narrowed.stderr and "no regressions" not in narrowed.stdout
    # improvements are listed, never gate
    improved = orchestra("report", str(jobs / "same"), "--baseline", str(jobs / "gated"),
                         "--fail-on-regression")
    assert improved.returncode == 0 and "improved (no layer): ds/beta  0/1 -> 1/1" in improved.stdout
    # a bad baseline is refused before any trial runs
    missing = orchestra("run", *common, "--manifest", str(good), "--job-name", "never",
                        "--baseline", str(jobs / "nothing-here"))
    assert missing.returncode == 2 and not (jobs / "never").exists()


def test_with_five_attempts_the_gate_tells_a_regression_from_chance_and_names_flaky_tasks(tmp_path):
    ds, jobs = dataset(tmp_path), tmp_path / "jobs"
    # baseline: alpha 5/5, beta 5/5; gamma 3/5 and delta 4/5 are flaky in the baseline
    before = release(tmp_path, "before", {"gamma": {3, 4}, "delta": {4}})
    # now: beta 5/5 -> 0/5, gamma 3/5 -> 2/5, delta 4/5 -> 0/5
    after = release(tmp_path, "after", {"beta": {0, 1, 2, 3, 4}, "gamma": {2, 3, 4}, "delta": {0, 1, 2, 3, 4}})
    common = ["--path", str(ds), "-k", "5", "-n", "4", "--jobs-dir", str(jobs), "-q"]
    assert orchestra("run", *common, "--manifest", str(before), "--job-name", "base").returncode == 0
    now = orchestra("run", *common, "--manifest", str(after), "--job-name", "now", "--json", "-",
                    "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert now.returncode == 1, now.stderr
    assert json.loads(now.stdout)["n_trials"] == 20  # stdout is the job's JSON alone
    verdicts = {v["task"]: v for v in json.loads((jobs / "now/regressions.json").read_text())["tasks"]}
    beta, gamma, delta = verdicts["ds/beta"], verdicts["ds/gamma"], verdicts["ds/delta"]
    assert (beta["verdict"], beta["gates"], round(beta["p_value"], 4)) == ("regressed", True, 0.004)  # 1/252
    assert (gamma["verdict"], gamma["gates"], gamma["p_value"], gamma["note"]) == ("flaky", False, 0.5, "within chance")
    assert (delta["verdict"], delta["gates"], delta["note"]) == ("flaky", False, "regressed beyond chance")
    assert (delta["baseline"], delta["now"]) == ({"passed": 4, "graded": 5}, {"passed": 0, "graded": 5})
    alpha = verdicts["ds/alpha"]  # 5/5 -> 5/5: compared, unchanged, listed
    assert (alpha["verdict"], alpha["gates"], alpha["test"], alpha["now"]) == ("same", False, "exact", {"passed": 5, "graded": 5})
    assert "regressed (no layer): ds/beta  5/5 -> 0/5  p=0.00397" in now.stderr
    assert "flaky in the baseline (no layer): ds/gamma  3/5 -> 2/5  p=0.5  (within chance) [not gated]" in now.stderr
    # flaky tasks gate only when asked: delta's 4/5 -> 0/5 (p = 5/210) then gates, gamma's drop does not
    asked = orchestra("report", str(jobs / "now"), "--baseline", str(jobs / "base"), "--flaky", "gate",
                      "--fail-on-regression", "--json", "-")
    gate = json.loads(asked.stdout)["gate"]
    assert asked.returncode == 1 and gate["regressions"] == {"-": ["ds/beta", "ds/delta"]}
    # ignored, they are not listed at all
    ignore = orchestra("report", str(jobs / "now"), "--baseline", str(jobs / "base"), "--flaky", "ignore",
                       "--json", "-")
    gate = json.loads(ignore.stdout)["gate"]
    assert ignore.returncode == 0 and {v["task"] for v in gate["tasks"]} == {"ds/alpha", "ds/beta"}
    assert gate["ignored"] == ["ds/delta", "ds/gamma"]
    assert gate["flaky"] == "ignore" and "Benjamini-Hochberg" in gate["rule"]


def test_a_gate_with_nothing_in_common_exits_2_naming_both_jobs(tmp_path):
    jobs = tmp_path / "jobs"
    ds, other = dataset(tmp_path, ("alpha",)), dataset(tmp_path, ("zeta",), name="other")
    good = release(tmp_path, "v1", {})
    common = ["-k", "1", "--jobs-dir", str(jobs), "-q", "--manifest", str(good)]
    assert orchestra("run", "--path", str(ds), *common, "--job-name", "base").returncode == 0
    assert orchestra("run", "--path", str(other), *common, "--job-name", "elsewhere").returncode == 0
    # the README's old example: two datasets with no task in common passed, "no regressions"
    vacuous = orchestra("report", str(jobs / "elsewhere"), "--baseline", str(jobs / "base"), "--fail-on-regression",
                        "--junit", str(tmp_path / "junit.xml"))
    assert vacuous.returncode == 2, vacuous.stdout + vacuous.stderr
    assert "nothing to compare: job elsewhere (1 task(s): other/zeta) and the baseline job base (1 task(s): " \
           "ds/alpha) share no task, by name or by content hash" in vacuous.stderr
    assert "no regressions" not in vacuous.stdout and not (jobs / "elsewhere/regressions.json").exists()
    # `orchestra run --baseline` refuses it before any trial runs (the job would compare nothing)
    refused = orchestra("run", "--path", str(other), *common, "--job-name", "never",
                        "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"job {jobs / 'never'} (1 task(s): other/zeta) and the baseline job {jobs / 'base'}" in refused.stderr
    assert not (jobs / "never").exists()


def test_a_renamed_dataset_is_matched_by_content_hash_and_its_regression_gates(tmp_path):
    jobs = tmp_path / "jobs"
    ds = dataset(tmp_path, ("alpha", "beta"))
    renamed = tmp_path / "checkout-2" / "ds-release"  # the same dataset, checked out under another name
    shutil.copytree(ds, renamed)
    good, broken = release(tmp_path, "v1", {}), release(tmp_path, "v2", {"beta": {0}})
    common = ["-k", "1", "--jobs-dir", str(jobs), "-q"]
    assert orchestra("run", "--path", str(ds), *common, "--manifest", str(good), "--job-name", "base").returncode == 0
    gated = orchestra("run", "--path", str(renamed), *common, "--manifest", str(broken), "--job-name", "now",
                      "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert gated.returncode == 1, gated.stdout + gated.stderr  # by name it would have compared nothing
    assert ("regressed (no layer): ds-release/beta  1/1 -> 0/1  (one attempt each side: one attempt cannot "
            "tell a regression from chance)  [matched by content hash to the baseline's ds/beta]") in gated.stdout
    assert "(matched 2 by content hash): 1 regressed, 1 unchanged" in gated.stdout
    verdicts = json.loads((jobs / "now/regressions.json").read_text())
    assert {v["task"]: (v["verdict"], v["matched_by"], v["baseline_task"]) for v in verdicts["tasks"]} == {
        "ds-release/alpha": ("same", "content hash", "ds/alpha"),
        "ds-release/beta": ("regressed", "content hash", "ds/beta")}
    assert verdicts["only_here"] == [] and verdicts["only_baseline"] == []
    report = orchestra("report", str(jobs / "now"), "--baseline", str(jobs / "base"), "--fail-on-regression",
                       "--junit", str(tmp_path / "junit.xml"))
    assert report.returncode == 1
    cases = gate_cases(tmp_path / "junit.xml")
    assert {task: (c["verdict"], c["matched_by"], c["baseline_task"]) for task, c in cases.items()} == {
        "ds-release/alpha": ("same", "content hash", "ds/alpha"),
        "ds-release/beta": ("regressed", "content hash", "ds/beta")}


def test_mixed_k_is_one_rule_and_k_auto_is_honest_about_a_one_attempt_baseline(tmp_path):
    jobs = tmp_path / "jobs"
    ds = dataset(tmp_path, ("alpha", "beta"))
    good = release(tmp_path, "v1", {})
    common = ["--path", str(ds), "--jobs-dir", str(jobs), "-q"]
    assert orchestra("run", *common, "-k", "1", "--manifest", str(good), "--job-name", "base").returncode == 0
    # k=3 against k=1: beta fails once in three (1/1 -> 2/3). The old rule (k=1 on a side:
    # passed there, failed once now) gated it; the exact test says chance (p = 0.75)
    wobbly = release(tmp_path, "v2", {"beta": {1}})
    now = orchestra("run", *common, "-k", "3", "--manifest", str(wobbly), "--job-name", "k3",
                    "--baseline", str(jobs / "base"), "--fail-on-regression")
    assert now.returncode == 0, now.stdout + now.stderr
    assert "dropped within chance (no layer): ds/beta  1/1 -> 2/3  p=0.75" in now.stdout
    verdicts = {v["task"]: v for v in json.loads((jobs / "k3/regressions.json").read_text())["tasks"]}
    beta, alpha = verdicts["ds/beta"], verdicts["ds/alpha"]
    assert (beta["verdict"], beta["gates"], beta["test"], beta["p_value"]) == ("dropped", False, "exact", 0.75)
    assert (alpha["verdict"], alpha["test"], alpha["now"]) == ("same", "exact", {"passed": 3, "graded": 3})
    # -k auto against the k=1 baseline: no k up to 20 tells a drop of 0.5 from one attempt (the
    # old answer, k=3, failed a 90% task 27% of the time): it runs the baseline's own k=1 and
    # says the one-attempt rule judges it; a task that then fails is named as that rule's verdict
    broken = release(tmp_path, "v3", {"beta": {0}})
    auto = orchestra("run", *common, "-k", "auto", "--detect-drop", "0.5", "--manifest", str(broken),
                     "--job-name", "auto", "--baseline", str(jobs / "base"), "--fail-on-regression", "--json", "-")
    assert auto.returncode == 1, auto.stderr
    assert json.loads(auto.stdout)["n_trials"] == 2  # k = 1
    assert "-k auto: k=1 against the baseline's attempts (it ran each task up to 1 time(s))" in auto.stderr
    assert "no k up to 20 can tell it for 2 task(s) the baseline ran too few times (ds/alpha (1/1 in the " \
           "baseline), ds/beta (1/1 in the baseline))" in auto.stderr
    assert "rerun the baseline with -k 10" in auto.stderr
    assert "judged by the one-attempt rule" in auto.stderr and "fails the gate 1 time in 10" in auto.stderr
    beta = {v["task"]: v for v in json.loads((jobs / "auto/regressions.json").read_text())["tasks"]}["ds/beta"]
    assert (beta["verdict"], beta["gates"], beta["test"]) == ("regressed", True, "one attempt")


CRASH = """
import sys
import orchestrator.report.summary as summary
from orchestrator.cli.commands import main

def render_job(*args, **kwargs):
    raise ZeroDivisionError("a bug after the trials ran")

summary.render_job = render_job
sys.argv = ["orchestra", *sys.argv[1:]]
main()
"""


def test_orchestra_crashing_after_a_real_run_exits_70_not_1(tmp_path):
    jobs, crashes = tmp_path / "jobs", tmp_path / "crashes"
    crashes.mkdir()
    ds = dataset(tmp_path, ("alpha",))
    # a bug planted in the rendering after the run: before, Python's traceback exited 1,
    # which a release pipeline reads as "the gate failed"
    crashed = subprocess.run([sys.executable, "-c", CRASH, "run", "--path", str(ds), "--agent", "nop",
                              "--jobs-dir", str(jobs), "--job-name", "crash", "-q"],
                             capture_output=True, text=True, env={**os.environ, "TMPDIR": str(crashes)}, timeout=900)
    assert crashed.returncode == 70, crashed.stdout + crashed.stderr
    assert "orchestra failed (a bug in orchestra, not a verdict on the agent or your input): " \
           "ZeroDivisionError: a bug after the trials ran" in crashed.stderr
    where = re.search(r"the traceback is in (\S+); exit 70", crashed.stderr)
    assert where and Path(where.group(1)).parent == crashes
    trace = Path(where.group(1)).read_text()
    assert trace.startswith("orchestra run --path ") and "in _render_and_gate" in trace
    assert "ZeroDivisionError: a bug after the trials ran" in trace
    assert len(list((jobs / "crash/trials").glob("*/result.json"))) == 1  # the trial's result is kept
