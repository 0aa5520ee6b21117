"""The dataset is an attacker (DESIGN 4): a dataset holding a bystander task and hostile
task folders of our own, run as a user would (`orchestra run --agent oracle`). Every hostile
folder is refused at load naming its file and field, nothing starts; with --skip-broken the
bystander still runs and scores 1. tests/hostile/README.md has a row per case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import make_task, orchestra_objects

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
SMALL = "[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"
LAUGHS = "\n".join(
    ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    + ["services:\n  main:\n    environment:\n      X: *i"])
DEEP = "x = " + "[" * 100_000 + "]" * 100_000 + "\n"

# case -> (what each stderr line must name: file, field or problem)
EXPECTED = {
    "link-out": ("link-out/instruction.md", "/proc/self/environ", "links out"),
    "laughs": ("laughs/environment/docker-compose.yaml", "alias"),
    "deep-toml": ("deep-toml/task.toml", "nested"),
    "inf-timeout": ("inf-timeout/task.toml", "agent.timeout_sec"),
    "zero-memory": ("zero-memory/task.toml", "environment.memory"),
    "workdir-logs": ("workdir-logs/task.toml", "environment.workdir"),
    "long-name": ("long-name/task.toml", "task.name", "the limit is 200"),
    "sidecar-context": ("sidecar-context/environment/docker-compose.yaml", "services.db.build.context"),
    "sidecar-wait": ("sidecar-wait/environment/docker-compose.yaml", "services.db.healthcheck.start_period"),
}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    ds = tmp_path / "ds"
    # a fresh image each run (a unique file in its context): the build goes through the
    # streamed build context, with a data file the Dockerfile copies and test.sh checks
    make_task(ds, "a-bystander", solve="touch /app/ok\n", toml=SMALL,
              dockerfile="FROM python:3.12-slim-bookworm\nWORKDIR /app\nCOPY . /ctx/\n",
              test="mkdir -p /logs/verifier\n[ -e /app/ok ] && [ $(wc -c < /ctx/data.txt) = 4096 ] "
                   "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
              files={"environment/token": uuid.uuid4().hex, "environment/data.txt": "x" * 4096})
    link = make_task(ds, "link-out", toml=SMALL)
    (link / "instruction.md").unlink()
    (link / "instruction.md").symlink_to("/proc/self/environ")
    make_task(ds, "laughs", toml=SMALL, files={"environment/docker-compose.yaml": LAUGHS})
    make_task(ds, "deep-toml", files={"task.toml": DEEP})
    make_task(ds, "inf-timeout", toml="[agent]\ntimeout_sec = inf\n" + SMALL)
    make_task(ds, "zero-memory", toml='[environment]\nmemory = "0M"\n')
    make_task(ds, "workdir-logs", toml=SMALL + 'workdir = "/logs"\n')
    make_task(ds, "long-name", toml=f'[task]\nname = "ds/{"n" * 300}"\n' + SMALL)
    make_task(ds, "sidecar-context", toml=SMALL,
              files={"environment/docker-compose.yaml": "services:\n  db:\n    build: ../../../..\n"})
    make_task(ds, "sidecar-wait", toml=SMALL, files={"environment/docker-compose.yaml": (
        "services:\n  db:\n    image: redis:7\n    healthcheck:\n      test: [\"CMD\", \"true\"]\n"
        "      start_period: 1000000000s\n")})
    return ds


def attacks_in_place(ds: Path) -> None:
    """Each hostile folder holds its attack (the positive control before any outcome)."""
    link = ds / "link-out/instruction.md"
    assert link.is_symlink() and os.readlink(link) == "/proc/self/environ"
    compose = (ds / "laughs/environment/docker-compose.yaml").read_text()
    assert len(compose) < 600 and compose.count("*") >= 70  # 9^9 strings when expanded
    assert (ds / "deep-toml/task.toml").read_text().count("[") == 100_000
    assert "timeout_sec = inf" in (ds / "inf-timeout/task.toml").read_text()
    assert 'memory = "0M"' in (ds / "zero-memory/task.toml").read_text()
    assert 'workdir = "/logs"' in (ds / "workdir-logs/task.toml").read_text()
    assert "n" * 300 in (ds / "long-name/task.toml").read_text()
    context = (ds / "sidecar-context/environment" / "../../../..").resolve()
    assert not context.is_relative_to(ds)  # the context reaches above the dataset
    assert "1000000000s" in (ds / "sidecar-wait/environment/docker-compose.yaml").read_text()


def orchestra_run(ds: Path, jobs: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([ORCHESTRA, "run", "--path", str(ds), "--agent", "oracle", "-q",
                           "--jobs-dir", str(jobs), "--job-name", "ds", *extra],
                          capture_output=True, text=True, timeout=600)


def test_a_hostile_dataset_exits_2_naming_each_task_and_starts_nothing(runtime, dataset, tmp_path):
    attacks_in_place(dataset)
    before = set(orchestra_objects(runtime)[0])
    proc = orchestra_run(dataset, tmp_path / "jobs")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for case, fragments in EXPECTED.items():
        lines = [line for line in proc.stderr.splitlines() if f"/{case}/" in line]
        assert any(all(f in line for f in fragments) for line in lines), (case, lines)
    assert "a-bystander" not in proc.stderr  # the bystander is not blamed
    assert set(orchestra_objects(runtime)[0]) == before  # nothing started
    assert not (tmp_path / "jobs/ds/trials").exists()


def test_skip_broken_runs_the_bystander_and_it_scores_1(runtime, dataset, tmp_path):
    attacks_in_place(dataset)
    proc = orchestra_run(dataset, tmp_path / "jobs", "--skip-broken")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "jobs/ds/trials").glob("*/result.json")]
    assert [r["task"].split("/")[-1] for r in results] == ["a-bystander"]
    assert results[0]["reward"]["reward"] == 1.0
    job = json.loads((tmp_path / "jobs/ds/result.json").read_text())
    assert job["images_built"] >= 1  # its image was built here, from the streamed context
