"""The orphan reaper removes what a dead orchestrator left, never a live job's objects that
carry the same job name (a resume, or one --job-name in two --jobs-dir)."""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Literal

from orchestrator.host.cleanup import plan, reap_orphans
from orchestrator.runtime import OwnedObject


class Engine:
    """owned_objects / labelled / remove* over a list of rows (what reap touches)."""

    def __init__(self, rows: list[OwnedObject]) -> None:
        self.rows = rows
        self.removed: list[str] = []

    def owned_objects(self) -> list[OwnedObject]:
        return [r for r in self.rows if r.name not in self.removed]

    def labelled(self, *labels: str) -> tuple[list[str], list[str], list[str]]:
        def has(row: OwnedObject) -> bool:
            return all(row.labels.get(k) == v for k, _, v in (lab.partition("=") for lab in labels))
        rows = [r for r in self.owned_objects() if has(r)]
        return ([r.name for r in rows if r.kind == "container"],
                [r.name for r in rows if r.kind == "network"],
                [r.name for r in rows if r.kind == "volume"])

    def remove(self, name: str) -> None:
        self.removed.append(name)

    remove_volume = remove_network = remove

    def loop_disks(self) -> None:
        return None


def _row(kind: Literal["container", "network", "volume"], name: str, job: str, pid: int) -> OwnedObject:
    return OwnedObject(kind, name, {"orchestra.job": job, "orchestra.pid": str(pid),
                                    "orchestra.host": socket.gethostname()})


def test_a_dead_owners_objects_go_and_a_live_job_of_the_same_name_keeps_its_own():
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has any more
    live = os.getpid()
    engine = Engine([_row("container", "killed-c", "nightly", gone.pid),
                     _row("network", "killed-n", "nightly", gone.pid),
                     _row("container", "resumed-c", "nightly", live),
                     _row("network", "resumed-n", "nightly", live),
                     _row("container", "other-c", "other", live)])
    assert {r.name for r in plan(engine)} == {"killed-c", "killed-n"}  # cleanup's default scope
    totals = reap_orphans(engine)
    assert sorted(engine.removed) == ["killed-c", "killed-n"]
    assert totals["containers"] == 1 and totals["networks"] == 1
    assert {r.name for r in plan(engine, job="nightly")} == {"resumed-c", "resumed-n"}
