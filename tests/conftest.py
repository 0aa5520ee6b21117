"""Shared fixtures: a real Docker runtime, and a builder for throwaway task folders."""

from __future__ import annotations

import os
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from engineshare import (  # noqa: F401  (autouse fixtures; the hook orders the files)
    _engine_hold,
    _exclusive_test,
    foreign,
    pytest_collection_modifyitems,
    shared_hold,
)
from partsline import (  # noqa: F401  (pytest's hooks: the parts line at the session's end)
    pytest_addoption,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import JobResult, TrialResult
from orchestrator.runtime import OwnedObject
from orchestrator.tasks.load import load_tasks

ROOT = Path(__file__).resolve().parent.parent
# Jobs the tests run neither read nor write this host's recorded durations (job/durations.py):
# their trials run in the order given, whatever ran before, and the user's record stays theirs.
os.environ["ORCHESTRA_DURATIONS"] = ""


@pytest.fixture(scope="session")
def runtime():
    from orchestrator.runtime.docker import DockerRuntime

    with shared_hold():
        return DockerRuntime(max_pool_size=128)


def make_task(root: Path, name: str, *, solve: str = "true", test: str | None = None,
              toml: str = "", dockerfile: str | None = None, files: dict[str, str] | None = None
              ) -> Path:
    """A Harbor-format task folder. `test` defaults to reward 1 when /app/ok exists."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "task.toml").write_text(textwrap.dedent(toml) or "[agent]\ntimeout_sec = 60\n")
    (task / "instruction.md").write_text(f"Do the {name} thing.\n")
    (task / "environment" / "Dockerfile").write_text(
        dockerfile or "FROM python:3.12-slim-bookworm\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    default_test = (
        "mkdir -p /logs/verifier\n"
        "if [ -e /app/ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test or default_test))
    for rel, content in (files or {}).items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(content)
    return task


def run(runtime, path: Path, jobs_dir: Path, agent: str = "oracle", n: int = 4, k: int = 1,
        name: str | None = None) -> tuple[JobResult, list[TrialResult]]:
    options = JobOptions(job_name=name or f"test-{uuid.uuid4().hex[:8]}", jobs_dir=jobs_dir,
                         n_concurrent=n, k=k)
    job = run_job(runtime, load_tasks(path), default_manifest(agent), options)
    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((jobs_dir / options.job_name / "trials").glob("*/result.json"))]
    return job, trials


def by_task(trials: list[TrialResult]) -> dict[str, TrialResult]:
    return {t.task.split("/")[-1]: t for t in trials}


def _ours(runtime) -> list[OwnedObject]:
    """Every container, network and volume orchestra made, less another worker's running
    job's (tests/engineshare.py: under an exclusive hold, the whole engine)."""
    return [r for r in runtime.owned_objects() if "orchestra.job" in r.labels and not foreign(r.labels)]


def orchestra_objects(runtime) -> tuple[list, list]:
    rows = _ours(runtime)
    return ([r.name for r in rows if r.kind == "container"],
            [r.name for r in rows if r.kind == "network"])


def orchestra_loop_devices() -> list[str]:
    """Loop devices whose backing file is one of orchestra's trial disks (in a folder named
    JOBKEY-PID, runtime/disk.py), less another worker's running job's."""
    import subprocess

    from orchestrator.runtime.disk import DISK_ROOT

    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        if str(DISK_ROOT) not in line:
            continue
        group = line.split(str(DISK_ROOT) + "/", 1)[1].split("/", 1)[0]
        if not foreign({"orchestra.pid": group.rsplit("-", 1)[-1]}):
            found.append(line)
    return found


def nothing_left(runtime) -> dict[str, list]:
    """What orchestra made that is still there: containers, networks, volumes, loop devices."""
    rows = _ours(runtime)
    found = {kind + "s": [r.name for r in rows if r.kind == kind] for kind in ("container", "network", "volume")}
    found["loop_devices"] = orchestra_loop_devices()
    return {k: v for k, v in found.items() if v}


def wait_for(predicate, timeout: float, interval: float = 0.1) -> None:
    """Poll for a condition with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError("timed out waiting")


LEAKY_FACT = ("---\nname: secret\ndescription: d\nmetadata:\n  type: project\n  scope: project\n"
              "---\n\nThe deploy password hint is correct horse battery staple.\n")


def make_leaky_task(root: Path, name: str) -> Path:
    """A badly built task whose image ships its own memory folder: the oracle finds the
    seed source there, cats it and logs the read (an answer leak)."""
    return make_task(root, name, files={"memory/project/secret.md": LEAKY_FACT,
                                        "environment/memory/project/secret.md": LEAKY_FACT},
                     dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\nCOPY memory /srv/task/memory\n",
                     solve="""
                       cd /srv/task
                       out=$(cat memory/project/secret.md)
                       traj tool shell "cat memory/project/secret.md" --output "$out"
                       touch /app/ok
                     """)


HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
_PROBE = ("import sys, urllib.request\n"
          "try:\n    urllib.request.urlopen('https://pypi.org/simple/six/', timeout=15).read(64)\n"
          "except Exception as e:\n    sys.exit(str(e)[:200])\n")


@pytest.fixture(scope="session")
def container_network(runtime) -> str:
    """How a container on this host reaches PyPI, probed once: 'direct' (its own trust store
    will do), 'intercepted' (only with the host's CA bundle: a TLS-intercepting proxy, as on
    these machines) or 'none'. Tests that need the network derive their expectation from
    it instead of assuming this host's proxy, and skip (part network-containers) on 'none'."""
    import subprocess

    from orchestrator.tasks.standins import base_image

    def reaches(with_ca: bool) -> bool:
        mount = ["-v", f"{HOST_CA}:/host-ca.pem:ro", "-e", "SSL_CERT_FILE=/host-ca.pem"] if with_ca else []
        done = subprocess.run(["docker", "run", "--rm", "--label", "orchestra.kind=probe", *mount,
                               base_image("bookworm"), "python3", "-c", _PROBE],
                              capture_output=True, text=True, timeout=120)
        return done.returncode == 0
    with shared_hold():
        if reaches(with_ca=False):
            return "direct"
        return "intercepted" if HOST_CA.exists() and reaches(with_ca=True) else "none"


def needs_container_network(found: str) -> None:
    """Skip, saying why, where containers reach no package index."""
    if found == "none":
        pytest.skip("needs PyPI from inside containers, which this host does not reach (network-containers)")


@pytest.fixture(scope="session")
def host_network() -> bool:
    """Whether this host reaches PyPI and the npm registry (installed agent CLIs come from
    them on a machine's first run), with the host's own trust store."""
    import urllib.request

    try:
        for url in ("https://pypi.org/simple/six/", "https://registry.npmjs.org/is-number"):
            urllib.request.urlopen(url, timeout=15).read(64)
    except OSError:
        return False
    return True
