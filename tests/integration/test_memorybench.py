"""memorybench on the real engine: both arms, state roots, the answer-leak stop, compare."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, make_leaky_task, make_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

SUITE = ROOT / "tasks" / "memorybench"
ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def arm(runtime, path, jobs, policy, agent="oracle", name=None):
    options = JobOptions(job_name=name or f"mb-{policy}-{agent}", jobs_dir=jobs, policy=policy,
                         n_concurrent=4)
    job = run_job(runtime, load_tasks(path), default_manifest(agent), options)
    trials = {}
    for folder in (jobs / options.job_name / "trials").iterdir():
        result = TrialResult.model_validate_json((folder / "result.json").read_text())
        trials[result.task.split("/")[-1]] = (result, folder)
    return job, trials


def test_oracle_scores_one_everywhere_in_the_on_arm_nop_zero_and_compare_shows_the_gain(runtime, tmp_path):
    jobs = tmp_path / "jobs"
    on_job, on = arm(runtime, SUITE, jobs, "memory-on")
    assert {name: r.reward["reward"] for name, (r, _) in on.items()} == dict.fromkeys(on, 1.0)
    assert len(on) == 12
    distractor = on["mb-distractor"][0].memory
    assert distractor.fact_files_seeded == 101 and distractor.markers_used == ["MEMKEY-DIST5Q"]
    assert distractor.recall_events >= 1 and distractor.hits >= 1

    off_job, off = arm(runtime, SUITE, jobs, "memory-off")
    assert all(r.memory.fact_files_seeded == 0 and r.memory.recall_events == 0
               for r, _ in off.values())
    failed_off = sorted(n for n, (r, _) in off.items() if r.reward["reward"] == 0.0)
    assert failed_off == ["mb-cjk", "mb-conflict", "mb-distractor", "mb-exact", "mb-paraphrase",
                          "mb-pin", "mb-symbol", "mb-update"]

    _, nop = arm(runtime, SUITE, jobs, "memory-on", agent="nop")
    assert all(r.reward["reward"] == 0.0 for r, _ in nop.values())

    out = tmp_path / "compare.json"
    proc = subprocess.run([ORCHESTRA, "compare", str(jobs / off_job.job), str(jobs / on_job.job),
                           "--json", str(out), "--markdown", str(tmp_path / "c.md")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "## Utility" in proc.stdout
    report = json.loads(out.read_text())
    assert report["on_job"] == on_job.job and report["paired"] == 12
    assert report["utility_delta_pp"] == round(100 * 8 / 12, 2)
    assert len(report["helpful"]) == 8 and report["harmful"] == []
    assert report["p_value"] == round(2 / 2 ** 8, 6)


def test_state_roots_are_fresh_random_and_hold_the_facts_only_in_the_on_arm(runtime, tmp_path):
    ds = tmp_path / "ds"
    probe = """
        find "$ORCHESTRA_STATE_HOME" -name '*.md' | sort > /logs/artifacts/facts.txt
        echo "$ORCHESTRA_STATE_HOME" > /logs/artifacts/state.txt
        echo "$TMPDIR" > /logs/artifacts/tmpdir.txt; test -d "$TMPDIR" && touch /logs/artifacts/tmpdir-exists
        find / -path /proc -prune -o -path '*/memory/project/*' -print 2>/dev/null > /logs/artifacts/sources.txt
        touch /app/ok
    """
    facts = {"memory/project/one.md": "---\nname: one\ndescription: d\nmetadata:\n  type: project\n  scope: project\n---\n\nfact one body\n",
             "memory/global/two.md": "---\nname: two\ndescription: d\nmetadata:\n  type: global\n  scope: global\n---\n\nfact two body\n"}
    make_task(ds, "probe-a", solve=probe, files=facts)
    make_task(ds, "probe-b", solve=probe, files=facts)
    _, on = arm(runtime, ds, tmp_path / "jobs", "memory-on")
    _, off = arm(runtime, ds, tmp_path / "jobs", "memory-off")
    read = lambda folder, name: (folder / "artifacts" / name).read_text().strip()  # noqa: E731
    a_state = read(on["probe-a"][1], "state.txt")
    assert read(on["probe-a"][1], "facts.txt").splitlines() == [
        f"{a_state}/memory/global/two.md", f"{a_state}/projects/-app/memory/one.md"]
    assert read(off["probe-a"][1], "facts.txt") == ""
    assert a_state != read(on["probe-b"][1], "state.txt")
    for name in ("probe-a", "app", "probe"):
        assert name not in a_state
    assert (on["probe-a"][1] / "artifacts/tmpdir-exists").exists()
    assert read(on["probe-a"][1], "sources.txt") == ""  # no seed source path in the container


def test_an_agent_reading_a_seed_source_is_answer_leak_and_the_job_exits_non_zero(runtime, tmp_path):
    ds = tmp_path / "ds"
    for later in ("b-later", "c-later"):
        make_task(ds, later, solve="touch /app/ok")
    make_leaky_task(ds, "a-leaky")
    # --build-ahead 0: the job's order (a-leaky first); with the build pool, cold tasks start
    # in their builds' finishing order and a later task could be graded before the leak
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "--jobs-dir",
                           str(tmp_path / "jobs"), "--job-name", "leak", "--n-concurrent", "1",
                           "--build-ahead", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 4, proc.stderr
    assert "answer leak" in proc.stderr
    results = {json.loads(p.read_text())["task"].split("/")[-1]: json.loads(p.read_text())
               for p in (tmp_path / "jobs/leak/trials").glob("*/result.json")}
    assert results["a-leaky"]["failure_mode"] == "answer_leak"
    assert results["a-leaky"]["memory"]["leaks"] == ["shell read memory/project/secret.md"]
    # The leak stopped the suite: the trials after it never ran to a score.
    assert {results[n]["failure_mode"] for n in ("b-later", "c-later")} == {"cancelled"}


SHADOW_TASKS = ("mb-exact", "mb-distractor", "mb-cjk", "mb-paraphrase")


def test_the_reference_agent_reports_the_memory_shadow_in_every_format(tmp_path):
    """The demo's arms (reference agent on replay, memory-on and -off) on four memorybench
    tasks: the memory shadow (recall counts, marker x/N, the V2 shadow's top-1 agreement) is
    in the run output, result.json, report.md/html and compare (text and JSON)."""
    for name in SHADOW_TASKS:
        shutil.copytree(SUITE / name, tmp_path / "mb" / name)
    common = ["--path", str(tmp_path / "mb"), "--manifest", str(ROOT / "manifests/solo-replay.yaml"),
              "--jobs-dir", str(tmp_path / "jobs"), "-n", "4"]
    env = {**os.environ}
    on = subprocess.run([ORCHESTRA, "run", *common, "--job-name", "on"], capture_output=True, text=True, env=env)
    off = subprocess.run([ORCHESTRA, "run", *common, "--job-name", "off", "--policy", "memory-off"],
                         capture_output=True, text=True, env=env)
    assert on.returncode == 0, on.stderr[-2000:]
    assert off.returncode == 0 and "mean reward: 0.000" in off.stdout  # memory-off misses every fact
    assert "memory shadow: recall events 4, hits 4" in on.stdout
    assert "point-of-use markers (x/N) 4/4" in on.stdout
    assert "top-1 agreement, primary vs V2 shadow 100% (4/4)" in on.stdout
    shadow = json.loads((tmp_path / "jobs/on/result.json").read_text())["memory_shadow"]
    assert (shadow["recall_events"], shadow["marker_trials"], shadow["marker_eligible"]) == (4, 4, 4)
    assert (shadow["shadow_events"], shadow["shadow_agree"]) == (4, 4)
    off_shadow = json.loads((tmp_path / "jobs/off/result.json").read_text())["memory_shadow"]
    assert (off_shadow["recall_events"], off_shadow["marker_trials"], off_shadow["marker_eligible"]) == (0, 0, 4)
    report = subprocess.run([ORCHESTRA, "report", str(tmp_path / "jobs/on")], capture_output=True, text=True)
    assert report.returncode == 0
    for name in ("report.md", "report.html"):
        text = (tmp_path / "jobs/on" / name).read_text()
        assert "Memory shadow" in text and "4/4" in text and "100% (4/4)" in text, name
    out = tmp_path / "compare.json"
    compared = subprocess.run([ORCHESTRA, "compare", str(tmp_path / "jobs/off"), str(tmp_path / "jobs/on"),
                               "--json", str(out)], capture_output=True, text=True, env=env)
    assert compared.returncode == 0, compared.stderr
    assert "## Memory shadow" in compared.stdout and "| point-of-use markers (x/N) | 4/4 | 0/4 |" in compared.stdout
    data = json.loads(out.read_text())
    assert data["memory_shadow"]["on"]["agreement"] == 1.0 and data["memory_shadow"]["off"]["marker_rate"] == "0/4"
    assert data["paired"] == 4 and data["unpaired"] == [] and len(data["helpful"]) == 4
