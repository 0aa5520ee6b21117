"""The doctor's leak scan and `run --skip-broken` on the real engine: an image without
python3 is `not scanned` (never leaky, never clean), and --skip-broken on a dataset the
doctor never checked says so on stderr, naming the command that makes the verdicts."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import make_task

from orchestrator.job.leakscan import leak_preflight
from orchestrator.tasks.load import load_task

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 512\n"
NO_PYTHON = ("FROM python:3.12-slim-bookworm\nWORKDIR /app\n"
             "RUN rm -f /usr/bin/python3* /usr/local/bin/python3* /usr/bin/python /usr/local/bin/python "
             "&& ! command -v python3\n")


def test_an_image_without_python3_is_not_scanned(runtime, tmp_path):
    task = load_task(make_task(tmp_path, "no-python", toml=SMALL, dockerfile=NO_PYTHON,
                               test="echo " + "padding " * 12 + "\n"))
    scan = leak_preflight(runtime, task)
    assert (scan.status, scan.leaks, scan.why) == ("not scanned", [], "no python3 in the image")


def test_skip_broken_on_a_dataset_the_doctor_never_checked_says_so(tmp_path):
    ds = tmp_path / "never-doctored"
    make_task(ds, "one", toml=SMALL)
    env = {**os.environ, "ORCHESTRA_CACHE": str(tmp_path / "cache")}
    env.pop("ORCHESTRA_CA_BUNDLE", None)
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "nop", "--skip-broken", "-q",
                           "--jobs-dir", str(tmp_path / "jobs")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"--skip-broken: no doctor verdicts exist for {ds}" in proc.stderr, proc.stderr
    assert f"`orchestra tasks doctor {ds}` makes them" in proc.stderr


def test_a_git_history_it_cannot_read_is_not_scanned(runtime, tmp_path):
    task = load_task(make_task(tmp_path, "no-git", toml=SMALL, test="echo " + "padding " * 12 + "\n",
                               dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\n"
                                          "RUN mkdir -p /src/.git && ! command -v git\n"))
    scan = leak_preflight(runtime, task)
    assert (scan.status, scan.leaks) == ("not scanned", [])
    assert scan.why == "/src/.git's history not read (no git in the image)"
