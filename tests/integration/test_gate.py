"""The regression gate for release pipelines, on jobs made by real runs: a Harbor-format
dataset with no layers, k = 1 and k = 5 on both sides, flaky tasks, and output that pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import make_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
TASKS = ("alpha", "beta", "gamma", "delta")


def orchestra(*args):
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True,
                          env={**os.environ}, timeout=900)


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


def dataset(root: Path) -> Path:
    for name in TASKS:  # Harbor's shape: no [metadata], so no evaluation layer
        make_task(root / "ds", name, toml="[agent]\ntimeout_sec = 60\n")
    return root / "ds"


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
    # the same verdict from `orchestra report`, with the rule in the JUnit file
    report = orchestra("report", str(jobs / "gated"), "--baseline", str(jobs / "base"),
                       "--fail-on-regression", "--junit", str(tmp_path / "junit.xml"))
    assert report.returncode == 1 and "regressed (no layer): ds/beta" in report.stdout
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="orchestra.gate.rule"' in junit and "REGRESSION (ds/beta  1/1 -&gt; 0/1" in junit
    # narrowed to a layer none of these tasks has: nothing gates
    narrowed = orchestra("report", str(jobs / "gated"), "--baseline", str(jobs / "base"),
                         "--fail-on-regression", "--gate-layer", "regression")
    assert narrowed.returncode == 0 and "tasks of the regression layer" in narrowed.stdout
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
    assert "ds/alpha" not in verdicts  # 5/5 -> 5/5
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
    assert ignore.returncode == 0 and {v["task"] for v in gate["tasks"]} == {"ds/beta"}
    assert gate["flaky"] == "ignore" and "Benjamini-Hochberg" in gate["rule"]
