"""Datasets in the wild (issue 25): the shapes third-party Harbor datasets take, in tasks of
our own, on the real engine. Each test is one cause the issue found: keys Harbor ignores,
bases no exact-string alias matched, a stand-in without pip, grading-time installs behind
the TLS-intercepting proxy, a reward map without `reward`, a data file named like a
compose file; then the doctor over a dataset of every verdict."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import make_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")  # the proxy's CA is in the host's bundle
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 512\n"

# The shape of a dataset's task.toml with its own keys (each seen in public datasets).
WILD_TOML = """version = "2.0"
name = "wild-pytest"
category = "software-engineering"
difficulty = "medium"
languages = ["python"]
expert_time_estimate_hours = 0.5
[task]
version = "2.0"
[metadata]
author_name = "someone"
[agent]
timeout_sec = 120
[verifier]
timeout_sec = 300
[environment]
image = "python:3.12.9-slim"
cpus = 0.5
memory_mb = 512
mcp_servers = []
"""
# A test.sh as the datasets write it: its test deps installed at grading time, by pip
PYTEST_TEST = """set -u
pip3 install --quiet --retries 1 --timeout 30 pytest==8.3.4 >/tmp/pip.log 2>&1 || { tail -5 /tmp/pip.log; }
cd /tests && pytest -q test_outputs.py
if [ $? -eq 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
TEST_OUTPUTS = """from pathlib import Path

def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == "42"
"""


def _trials(job_dir: Path) -> dict[str, TrialResult]:
    found = {}
    for path in (job_dir / "trials").glob("*/result.json"):
        r = TrialResult.model_validate_json(path.read_text())
        found[r.task.split("/")[-1]] = r
    return found


def test_wild_shapes_load_build_on_stand_ins_and_score_honestly(runtime, tmp_path, container_network):
    """pytest-at-grading installs pytest from PyPI in test.sh: 1.0 where containers reach
    PyPI (with the host's CA bundle), an honest 0.0 where they reach no index."""
    ds = tmp_path / "wild"
    make_task(ds, "pytest-at-grading", toml=WILD_TOML, dockerfile="FROM python:3.12.9-slim\nWORKDIR /app\n",
              solve="echo 42 > /app/answer.txt\n", test=PYTEST_TEST, files={"tests/test_outputs.py": TEST_OUTPUTS})
    make_task(ds, "trixie-python", toml=SMALL, dockerfile="FROM python:3.13-slim\nWORKDIR /app\n",
              solve="python -m venv /tmp/v && /tmp/v/bin/python -c 'import sys; print(sys.version)' > /app/v.txt\n",
              test="mkdir -p /logs/verifier\n"
                   "grep -q '^3.13' /app/v.txt && python3 -c 'import sys; assert sys.version_info[:2] == (3, 13)' "
                   "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    make_task(ds, "two-keys", toml=SMALL, solve="touch /app/ok\n",
              dockerfile="FROM public.ecr.aws/docker/library/python:3.11-slim@sha256:" + "0" * 64 + "\nWORKDIR /app\n",
              test="mkdir -p /logs/verifier\n"
                   "echo '{\"correctness\": 1, \"performance\": 0.5}' > /logs/verifier/reward.json\n")
    make_task(ds, "compose-named-data", toml=SMALL, solve="touch /app/ok\n",
              dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY docker-compose.yml /app/\n",
              files={"environment/docker-compose.yml": "services:\n  web:\n    ports: ['80:80']\n",
                     # a task about writing tasks ships one as data: not a task of the dataset
                     "environment/template/task.toml": "[agent\nnot toml at all\n"},
              test="mkdir -p /logs/verifier\n[ -f /app/docker-compose.yml ] && [ -e /app/ok ] && echo 1 "
                   "> /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    make_task(ds, "ubuntu", toml=SMALL, dockerfile="FROM ubuntu:24.04\nWORKDIR /app\n",
              solve="touch /app/ok\n")
    # the tag's Debian release decides (bookworm's apt pins and packages), its python said
    make_task(ds, "bookworm-tag", toml=SMALL, dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n",
              solve="touch /app/ok\n", test="mkdir -p /logs/verifier\n"
              "grep -q '^12' /etc/debian_version && [ -e /app/ok ] && echo 1 > /logs/verifier/reward.txt "
              "|| echo 0 > /logs/verifier/reward.txt\n")
    check = subprocess.run([ORCHESTRA, "tasks", "check", str(ds), "--json"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    listed = {Path(row["path"]).name: row["ignored_fields"] for row in json.loads(check.stdout)}
    assert listed["pytest-at-grading"] == ["name", "category", "difficulty", "languages",
                                           "expert_time_estimate_hours", "environment.image"]
    assert listed["ubuntu"] == []
    job = run_job(runtime, load_tasks(ds), default_manifest("oracle"),
                  JobOptions(job_name="wild", jobs_dir=tmp_path / "jobs", n_concurrent=2, ca_bundle=HOST_CA))
    t = _trials(tmp_path / "jobs/wild")
    assert {name: (r.failure_mode.value, r.headline) for name, r in t.items()} == {
        "pytest-at-grading": ("none", 0.0 if container_network == "none" else 1.0), "trixie-python": ("none", 1.0), "two-keys": ("none", 0.75),
        "compose-named-data": ("none", 1.0), "ubuntu": ("none", 1.0), "bookworm-tag": ("none", 1.0)}, \
        {n: r.error for n, r in t.items()}
    assert job.mean_reward == round((5 + 0.75 - (container_network == "none")) / 6, 6)
    tagged = t["bookworm-tag"].stand_ins[0]
    assert tagged.release == "bookworm" and "NOT the python 3.13 the tag names" in tagged.warning
    wild = t["pytest-at-grading"]
    assert wild.ignored_fields[-1] == "environment.image" and wild.schema_version == "2.0"  # read, not gated
    assert wild.stand_ins[0].stand_in == "orchestra/base:bookworm" and wild.stand_ins[0].python == "3.11"
    assert t["trixie-python"].stand_ins[0].release == "trixie"
    assert t["two-keys"].reward == {"correctness": 1.0, "performance": 0.5}
    assert "pinned by digest" in t["two-keys"].stand_ins[0].warning
    assert t["compose-named-data"].compose_services == []  # a data file, not a compose file
    assert "not Debian" in t["ubuntu"].stand_ins[0].reason
    # no tag was made for any reference that was stood in for
    assert not runtime.image_exists("python:3.12.9-slim") and not runtime.image_exists("ubuntu:24.04")


LEAKY_DOCKERFILE = "FROM python:3.12-slim-bookworm\nWORKDIR /app\nCOPY . /app\n"
CHECK = "mkdir -p /logs/verifier\nif [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n# padding so the file is worth a leak check\n"


def test_the_doctor_names_every_verdict_caches_it_and_run_skips_the_broken(runtime, tmp_path):
    ds = tmp_path / "doc"
    make_task(ds, "healthy", toml=SMALL, solve="touch /app/ok\n", test=CHECK)
    make_task(ds, "offline-test", toml=SMALL, solve="touch /app/ok\n",
              test="curl -sS https://pypi.invalid/simple/ >/dev/null 2>&1 || python3 -c "
                   "\"import urllib.request; urllib.request.urlopen('https://pypi.invalid/')\"\n"
                   "mkdir -p /logs/verifier; echo 0 > /logs/verifier/reward.txt\n")
    make_task(ds, "weak", toml=SMALL, solve="true\n", test="mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n")
    nosol = make_task(ds, "no-solution", toml=SMALL, test=CHECK)
    (nosol / "solution/solve.sh").unlink()
    leaky = make_task(ds, "leaky", toml=SMALL, solve="touch /app/ok\n", test=CHECK, dockerfile=LEAKY_DOCKERFILE)
    (leaky / "environment/test.sh").write_text((leaky / "tests/test.sh").read_text())  # COPY . ships the test
    make_task(ds, "unbuildable", toml=SMALL, dockerfile="FROM node:20\nRUN true\n", solve="touch /app/ok\n")
    (make_task(ds, "invalid", toml=SMALL) / "tests/test.sh").unlink()  # as 5 tasks of one dataset
    # the task's own defect: a helper its solution runs, shipped without its run bit
    make_task(ds, "no-run-bit", toml=SMALL, test=CHECK, solve="cd /solution && ./helper.sh\n",
              files={"solution/helper.sh": "#!/bin/bash\ntouch /app/ok\n"})
    # the task's own defect: step two's solution uses a file only step one ships
    make_task(ds, "step-reaches-out", toml=SMALL + '[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n',
              test=CHECK, files={
                  "steps/one/instruction.md": "x\n", "steps/two/instruction.md": "y\n",
                  "steps/one/solution/solve.sh": "bash /solution/make.sh\n",
                  "steps/one/solution/make.sh": "touch /app/one\n",
                  "steps/two/solution/solve.sh": "bash /solution/make.sh && touch /app/ok\n"})
    jobs = tmp_path / "jobs"
    env = {**os.environ, "ORCHESTRA_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([ORCHESTRA, "tasks", "doctor", str(ds), "--jobs-dir", str(jobs), "--json"],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 1, proc.stderr[-3000:]
    found = {Path(d["path"]).name: d for d in json.loads(proc.stdout)}
    assert {name: d["verdict"] for name, d in found.items()} == {
        "healthy": "healthy", "offline-test": "broken", "weak": "weak-test", "no-solution": "no-solution",
        "leaky": "leaky", "unbuildable": "broken", "invalid": "invalid", "no-run-bit": "broken",
        "step-reaches-out": "broken"}, found
    assert "uses /solution/make.sh, which step 'two' does not ship" in found["step-reaches-out"]["reason"]
    assert "the task's own defect: solution/solve.sh runs ./helper.sh" in found["no-run-bit"]["reason"]
    assert "tests/test.sh: missing" in found["invalid"]["reason"]
    assert "needs a network this host lacks" in found["offline-test"]["reason"]
    assert "the image holds tests/test.sh at /app/test.sh" in found["leaky"]["reason"]
    assert found["unbuildable"]["reason"].startswith("build failed") and "node:20" in found["unbuildable"]["reason"]
    assert (found["weak"]["oracle"], found["weak"]["nop"]) == (1.0, 1.0)
    runs = sorted(p.name for p in jobs.iterdir())
    again = subprocess.run([ORCHESTRA, "tasks", "doctor", str(ds), "--jobs-dir", str(jobs)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 1 and sorted(p.name for p in jobs.iterdir()) == runs  # the cache: no job
    assert "4 broken" in again.stdout, again.stdout
    skipped = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "--skip-broken", "-q",
                              "--jobs-dir", str(jobs), "--job-name", "after", "--json", "-"],
                             capture_output=True, text=True, env=env, timeout=600)
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    assert "--skip-broken: 7 task(s)" in skipped.stderr  # 4 broken, leaky, no-solution, invalid
    assert json.loads(skipped.stdout)["n_trials"] == 2  # healthy and weak
