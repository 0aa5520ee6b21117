"""A compose named volume where no loop disk can hold it to storage_mb (issue 45): refused
at the job's pre-flight (exit 2 naming the compose file, the volume and why) and, should a
trial still get there, by the trial's start (not retried), never given an unbounded engine
volume. The real-engine test is tests/hostile/test_dataset_volumes.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.job.preflight import unbounded_volumes
from orchestrator.runtime.base import Capabilities
from orchestrator.tasks import load_tasks
from orchestrator.trial.sidecars import UnboundedVolume, _named_volume

COMPOSE = "services:\n  main:\n    volumes:\n      - data:/data\nvolumes:\n  data:\n"


def task_folder(root: Path, name: str, compose: str | None) -> None:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text("[environment]\nstorage_mb = 64\n")
    (task / "instruction.md").write_text("x\n")
    (task / "environment/Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "tests/test.sh").write_text("#!/bin/bash\n")
    if compose is not None:
        (task / "environment/docker-compose.yaml").write_text(compose)


def caps(why: dict[str, str]) -> Capabilities:
    return Capabilities(disk_quota="watchdog" if why else "loop-volume", host_isolation="iptables",
                        oci_runtimes=["runc"], local_engine=True, why=why)


def test_a_named_volume_without_loop_disks_is_refused_naming_file_volume_and_why(tmp_path):
    task_folder(tmp_path, "with-volume", COMPOSE)
    task_folder(tmp_path, "plain", None)
    task_folder(tmp_path, "sidecar-only", "services:\n  db:\n    image: redis:7\n")
    tasks = load_tasks(tmp_path)
    why = "loop disks need root, mkfs.ext4 and /dev/loop-control"
    (problem,) = unbounded_volumes(tasks, caps({"disk_quota": why}))
    assert "with-volume/environment/docker-compose.yaml: field 'volumes.data'" in problem
    assert "storage_mb (64 MB)" in problem and why in problem
    assert unbounded_volumes(tasks, caps({})) == []  # loop disks: the volume is on the trial's disk


def test_a_trial_without_a_loop_disk_is_refused_a_named_volume_not_retried():
    made: list[str] = []
    runtime = SimpleNamespace(create_volume=lambda name, labels: made.append(name) or name)
    box = SimpleNamespace(loop_disk=None, labels=lambda kind: {})
    with pytest.raises(UnboundedVolume, match="compose volume 'data'.*no loop disk") as refused:
        _named_volume(runtime, box, "trial-data", "data")  # type: ignore[arg-type]
    assert refused.value.retryable is False and made == []
