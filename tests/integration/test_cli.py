"""`orchestra` as a user runs it: exit codes, messages, nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, make_task, orchestra_objects

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def orchestra(*args: str, env: dict | None = None, cwd: Path | None = None):
    return subprocess.run([ORCHESTRA, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def count_containers(runtime) -> int:
    return len(orchestra_objects(runtime)[0])  # less another test worker's running job's


@pytest.mark.parametrize("case, toml, remove, expected", [
    ("known key, wrong type", "[agent]\ntimeout_sec = 'soon'\n", None,
     ["task.toml", "agent.timeout_sec"]),
    ("wrong type", "[environment]\nmemory_mb = 'lots'\n", None,
     ["task.toml", "environment.memory_mb"]),
    ("missing test.sh", "", "tests/test.sh", ["tests/test.sh", "missing"]),
    ("gpus", "[environment]\ngpus = 1\n", None, ["environment", "gpus"]),
])
def test_a_malformed_task_exits_2_naming_file_and_field_and_starts_nothing(
        runtime, tmp_path, case, toml, remove, expected):
    task = make_task(tmp_path / "ds", "bad", toml=toml or "[agent]\ntimeout_sec = 10\n")
    if remove:
        (task / remove).unlink()
    before = count_containers(runtime)
    proc = orchestra("run", "--path", str(task), "--agent", "oracle",
                     "--jobs-dir", str(tmp_path / "jobs"))
    assert proc.returncode == 2, proc.stderr
    for fragment in expected:
        assert fragment in proc.stderr, (fragment, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert count_containers(runtime) == before
    check = orchestra("tasks", "check", str(task))
    assert check.returncode == 2 and expected[0] in check.stderr


def test_a_malformed_manifest_exits_2(tmp_path):
    make_task(tmp_path / "ds", "fine")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("roster:\n  - id: lead\n    agent: oracle\n    kindd: orchestrator\n")
    proc = orchestra("run", "--path", str(tmp_path / "ds"), "--manifest", str(manifest))
    assert proc.returncode == 2
    assert "m.yaml" in proc.stderr and "kindd" in proc.stderr


def test_docker_unreachable_exits_3_with_a_clear_message(tmp_path):
    make_task(tmp_path / "ds", "fine")
    proc = orchestra("run", "--path", str(tmp_path / "ds"), "--jobs-dir", str(tmp_path / "j"),
                     env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode == 3, proc.stderr
    assert "Docker engine unreachable" in proc.stderr


def test_run_writes_the_job_folder_and_leaves_nothing_even_when_trials_fail(runtime, tmp_path):
    ds = tmp_path / "ds"
    make_task(ds, "good", solve="touch /app/ok")
    make_task(ds, "unbuildable", dockerfile="FROM python:3.12-slim-bookworm\nRUN exit 7\n")
    make_task(ds, "no-base", dockerfile="FROM registry.invalid/nothing:1\n")
    out = tmp_path / "job.json"
    proc = orchestra("run", "--path", str(ds), "--manifest", str(ROOT / "manifests/oracle.yaml"),
                     "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    job = json.loads(out.read_text())
    modes = {t["task"].split("/")[-1]: (t["failure_mode"], t["reward"]) for t in job["trials"]}
    assert modes == {"good": ("none", 1.0), "unbuildable": ("build_error", None),
                     "no-base": ("build_error", None)}
    assert job["mean_reward"] == pytest.approx(1 / 3, abs=1e-6)
    assert len(job["errored"]) == 2
    folder = tmp_path / "jobs" / "j1"
    assert (folder / "config.json").is_file() and (folder / "result.json").is_file()
    assert len(list((folder / "trials").glob("*/result.json"))) == 3
    no_base = next((folder / "trials").glob("no-base__*/result.json")).read_text()
    # no registry answered its pull, and no stand-in is near a private registry's image
    failure = json.loads(no_base)["build_failure"]
    assert failure["reference"] == "registry.invalid/nothing:1" and "registry.invalid" in failure["pull_error"]
    assert "no offline base is near enough" in failure["message"] and failure["stand_in"] is None
    assert orchestra_objects(runtime) == ([], [])
    # The same job name again is refused, and the finished job is untouched.
    again = orchestra("run", "--path", str(ds), "--jobs-dir", str(tmp_path / "jobs"),
                      "--job-name", "j1")
    assert again.returncode == 2 and "already there" in again.stderr
    assert json.loads((folder / "result.json").read_text())["n_trials"] == 3


def test_forty_concurrent_trials_all_complete(runtime, tmp_path):
    # small declared cpus, so admission (2 engine cpus) lets all 40 run at once
    make_task(tmp_path / "ds", "quick", solve="touch /app/ok", toml="""
        [environment]
        cpus = 0.05
        memory_mb = 128
        storage_mb = 64
    """)
    proc = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-k", "40",
                     "--n-concurrent", "40", "--jobs-dir", str(tmp_path / "jobs"),
                     "--job-name", "forty", "--json", str(tmp_path / "forty.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads((tmp_path / "forty.json").read_text())
    assert job["n_trials"] == 40
    assert job["counts"] == {"none": 40}
    assert job["mean_reward"] == 1.0
    assert orchestra_objects(runtime) == ([], [])


def test_output_composes_json_alone_on_stdout_plain_tables_when_piped_and_a_version(tmp_path):
    make_task(tmp_path / "ds", "pipe", solve="touch /app/ok\n")
    jobs = ["--jobs-dir", str(tmp_path / "jobs")]
    run = orchestra("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "--json", "-", "-q",
                    *jobs, "--job-name", "piped")
    assert run.returncode == 0, run.stderr
    piped = subprocess.run([sys.executable, "-m", "json.tool"], input=run.stdout, capture_output=True, text=True)
    assert piped.returncode == 0 and json.loads(run.stdout)["mean_reward"] == 1.0
    assert "ds/pipe" in run.stderr and "job folder:" in run.stderr  # the human summary went to stderr
    report = orchestra("report", str(tmp_path / "jobs/piped"), "--json", "-")
    assert report.returncode == 0 and json.loads(report.stdout)["job"]["n_trials"] == 1
    assert json.loads(report.stdout)["tables"][0]["rows"]
    check = orchestra("tasks", "check", str(tmp_path / "ds"), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)[0]["task"] == "ds/pipe"
    for command in (["agents"], ["report", str(tmp_path / "jobs/piped")]):
        text = orchestra(*command).stdout  # stdout is a pipe here
        assert text.strip() and not set(text) & set("│┃━─┏┗╭╰"), text
    agents = json.loads(orchestra("agents", "--json").stdout)
    assert {"oracle", "nop", "reference"} <= {a["name"] for a in agents}
    dry = orchestra("cleanup", "--dry-run", "--json")
    assert dry.returncode == 0 and isinstance(json.loads(dry.stdout), list)
    version = orchestra("--version")
    assert version.returncode == 0 and version.stdout.strip() == "orchestra 0.1.0"
    assert "Exit codes, one meaning each" in orchestra("--help").stdout
