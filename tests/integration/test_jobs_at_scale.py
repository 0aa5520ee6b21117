"""Jobs that survive a killed orchestrator, a failing engine, Ctrl-C; reports for CI."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, make_task, orchestra_objects, wait_for
from docker.errors import APIError

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.runtime.docker import DockerRuntime
from orchestrator.tasks.load import load_tasks

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([ORCHESTRA, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def results(job_dir: Path) -> list[dict]:
    out = []
    for p in sorted((job_dir / "trials").glob("*/result.json")):
        try:
            out.append(json.loads(p.read_text()))
        except json.JSONDecodeError:
            pass
    return out


class FlakyEngine(DockerRuntime):
    """The real engine, with the first `failures` container starts failing as the API would."""

    def __init__(self, failures: int):
        super().__init__(max_pool_size=32)
        self.failures = failures

    def start(self, container: str) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise APIError("500 Server Error: injected: daemon restarting")
        super().start(container)


def test_docker_api_errors_are_retried_off_slot_and_marked(tmp_path):
    make_task(tmp_path / "ds", "steady", solve="touch /app/ok")
    engine = FlakyEngine(failures=3)
    options = JobOptions(job_name="flaky", jobs_dir=tmp_path / "jobs", n_concurrent=2, k=4,
                         backoff_multiplier=0.05)
    job = run_job(engine, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.counts == {"none": 4} and job.mean_reward == 1.0
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in (tmp_path / "jobs/flaky/trials").glob("*/result.json")]
    retried = [t for t in trials if t.retries]
    assert sum(len(t.retries) for t in trials) == 3
    assert all("injected: daemon restarting" in r for t in retried for r in t.retries)
    assert job.retried == len(retried)
    assert orchestra_objects(engine) == ([], [])


def test_an_agent_failure_is_never_retried(tmp_path, runtime):
    make_task(tmp_path / "ds", "fails", solve="exit 3", toml="[agent]\ntimeout_sec = 30\n")
    options = JobOptions(job_name="noretry", jobs_dir=tmp_path / "jobs", backoff_multiplier=0.05)
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.retried == 0 and job.trials[0].reward == 0.0


def test_sigint_cancels_promptly_cleans_up_and_marks_trials_cancelled(runtime, tmp_path):
    make_task(tmp_path / "ds", "long", solve="sleep 120\n", toml="[agent]\ntimeout_sec = 300\n")
    job_dir = tmp_path / "jobs" / "interrupted"
    proc = start("run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-k", "6", "-n", "3",
                 "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "interrupted", "-q")
    # at least two run at once (cpu-limit, the default: three; under reserve the engine's 2 cpus: two)
    wait_for(lambda: len(runtime.api.containers(filters={"label": "orchestra.job=interrupted"})) >= 2, 120)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    # hang guard: cancelled, the job ends in a few seconds; left running, its six 120 s
    # trials three at a time would take four minutes
    proc.wait(timeout=60)
    assert proc.returncode == 130, proc.stderr.read()
    assert orchestra_objects(runtime) == ([], [])
    job = json.loads((job_dir / "result.json").read_text())
    assert job["n_trials"] == 6 and job["counts"] == {"cancelled": 6}


def test_admission_never_oversubscribes_and_a_trial_that_cannot_fit_fails_alone(runtime, tmp_path):
    make_task(tmp_path / "ds", "onecpu", solve="sleep 1\ntouch /app/ok",
              toml="[environment]\ncpus = 1\nmemory_mb = 256\n")
    options = JobOptions(job_name="admit", jobs_dir=tmp_path / "jobs", n_concurrent=3, k=3, max_cpus=1.5,
                         admission="reserve")  # cpus held (the default, cpu-limit, holds memory only)
    job = run_job(runtime, load_tasks(tmp_path / "ds"), default_manifest("oracle"), options)
    assert job.mean_reward == 1.0 and job.peak_cpus == 1.0 and job.peak_memory_mb == 256
    make_task(tmp_path / "big", "huge", toml="[environment]\ncpus = 8\n")
    make_task(tmp_path / "big", "small", toml="[environment]\ncpus = 1\n", solve="touch /app/ok")
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "big"), "--max-cpus", "2",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "fit", "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    results = {r["task"].split("/")[-1]: r for r in
               (json.loads(p.read_text()) for p in (tmp_path / "jobs/fit/trials").glob("*/result.json"))}
    assert results["huge"]["failure_mode"] == "infeasible" and "cpus=8" in results["huge"]["error"]
    assert results["small"]["reward"] == {"reward": 1.0}


def test_layers_filter_and_default_k(runtime, tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(ROOT / "tasks/relay-native/reply-to-thread", ds / "reply-to-thread")
    make_task(ds, "wf", solve="touch /app/ok", toml='[metadata]\nevaluation_layer = "workflow"\n')
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "--layer", "regression",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "reg", "-q", "--json",
                           str(tmp_path / "reg.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [t["task"] for t in json.loads((tmp_path / "reg.json").read_text())["trials"]] == ["relay-native/reply-to-thread"]
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "-n", "4",
                           "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "mixed", "-q", "--json",
                           str(tmp_path / "mixed.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    counts = {}
    for t in json.loads((tmp_path / "mixed.json").read_text())["trials"]:
        counts[t["task"].split("/")[-1]] = counts.get(t["task"].split("/")[-1], 0) + 1
    assert counts == {"reply-to-thread": 1, "wf": 3}


def test_report_writes_markdown_html_and_junit_for_a_real_job(runtime, tmp_path):
    for agent in ("oracle", "nop"):
        proc = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples"), "--agent", agent,
                               "--jobs-dir", str(tmp_path / "jobs"), "--job-name", agent, "-q"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    job_dir = tmp_path / "jobs" / "nop"
    proc = subprocess.run([ORCHESTRA, "report", str(job_dir), "--junit", str(tmp_path / "junit.xml"),
                           "--fail-under", "0.5"], capture_output=True, text=True)
    assert proc.returncode == 1 and "below --fail-under" in proc.stderr
    assert "Per task" in proc.stdout and "Failure modes" in proc.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "3" and suite.get("failures") == "3"
    cases = suite.findall("testcase")
    assert sorted(c.get("name") for c in cases) == ["artifact-report#0", "hello-file#0", "multi-metric#0"]
    failure = cases[0].find("failure")
    assert failure is not None and "reward 0" in failure.get("message")
    ok = subprocess.run([ORCHESTRA, "report", str(tmp_path / "jobs/oracle"), "--fail-under", "1.0"],
                        capture_output=True, text=True)
    assert ok.returncode == 0
    md = (tmp_path / "jobs/oracle/report.md").read_text()
    assert "| examples/hello-file | 1 | 1.000 | 1/1 |" in md
    html_path = tmp_path / "jobs/oracle/report.html"
    assert html_path.read_text().count("<svg") >= 2
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/ensure-test-tools.sh installs it where it can)")
    browser = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                              "--disable-background-networking", "--disable-component-update", "--disable-sync",
                              f"--user-data-dir={tmp_path / 'chrome'}", "--enable-logging=stderr", "--v=0",
                              "--dump-dom", html_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert browser.returncode == 0
    assert "<svg" in browser.stdout and "Mean reward per task" in browser.stdout
    console_errors = [line for line in browser.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console_errors == []


def test_trials_past_the_admission_budget_wait_and_the_output_says_why(tmp_path):
    """Two 1-cpu trials under --max-cpus 1 with two slots: one waits, and a piped run says
    which budget it waits for (the live view shows the same under its table)."""
    for name in ("first", "second"):
        make_task(tmp_path / "ds", name, solve="sleep 1\ntouch /app/ok\n",
                  toml="[environment]\ncpus = 1\nmemory_mb = 256\n")
    orchestra = str(Path(sys.executable).parent / "orchestra")
    run = subprocess.run([orchestra, "run", "--path", str(tmp_path / "ds"), "--agent", "oracle", "-n", "2",
                          "--admission", "reserve", "--max-cpus", "1", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "budget"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "trials wait for admission (the host budget)" in run.stderr
    assert "cpus 1 of 1 in use, needs 1" in run.stderr
    assert "passed: 2" in run.stdout
