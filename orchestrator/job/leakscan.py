"""The doctor's leak scan (`orchestra tasks doctor`, job/doctor.py): what a task's built image
holds that it must not. Its tests' scripts and its solution, by content at any path (a
sha256 of every file under 2 MB, walked from / inside a container of the image with no
network), and any .git whose history has commits past its checked-out HEAD (the
repository's future). A scan that could not look is `not scanned`, with why: never clean.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from orchestrator.errors import BuildFailed, InfraError
from orchestrator.log import get_logger
from orchestrator.runtime import ContainerSpec, ExecResult, Runtime
from orchestrator.tasks import Task
from orchestrator.trial import ensure_task_images

log = get_logger()
NOT_SCANNED: Final = "not scanned"

SCAN = r"""
import hashlib, json, os, subprocess, sys
want, found, gits, unread = set(json.loads(sys.argv[1])), {}, [], []
for top in ("/",):
    for root, dirs, files in os.walk(top, onerror=lambda e: unread.append(str(e.filename))):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev", "/opt/orchestra")]
        if ".git" in dirs:
            gits.append(root)
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 2_000_000:
                    continue
                digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
            except OSError:
                continue
            if digest in want:
                found.setdefault(digest, []).append(path)
def git(repo, *args):
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", repo, *args],
                          capture_output=True, text=True, timeout=30)
future = {}
for repo in gits:
    try:
        head = git(repo, "rev-parse", "-q", "--verify", "HEAD").returncode == 0
        out = git(repo, "rev-list", "--all", "--count", *(["--not", "HEAD"] if head else []))
        lines = (out.stderr or out.stdout).strip().splitlines() or ["(nothing said)"]
        future[repo] = int(out.stdout.strip()) if out.returncode == 0 else "git failed: " + lines[-1][:200]
    except FileNotFoundError:
        future[repo] = "no git in the image"
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        future[repo] = f"git failed: {exc}"[:200]
print(json.dumps({"found": found, "future": future, "unread": unread[:20]}))
"""
MIN_LEAK_BYTES = 64  # a tiny file (an empty __init__.py, "#!/bin/bash") proves nothing
SCAN_SECONDS = 300


@dataclass
class LeakScan:
    """What the leak scan found: `clean` (it looked everywhere and found nothing), `leaky`
    (`leaks` says what), or `not scanned` (`why`: it could not look, or not everywhere)."""
    status: Literal["clean", "leaky", "not scanned"]
    leaks: list[str] = field(default_factory=list)
    why: str = ""


def leak_preflight(runtime: Runtime, task: Task, ca_bundle: Path | None = None) -> LeakScan:
    """What the task's built image holds that it must not: its tests or solution files (by
    content, at any path), or a git history past its HEAD. A scan that could not look (no
    python3 in the image, the image not built, the engine failing, the scan failing or
    timing out, a .git history unreadable) is `not scanned`, with why: never clean."""
    secrets: dict[str, str] = {}
    for folder in [*task.tests_dirs, task.solution_dir]:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []:
            # the solution whole; of the tests, the scripts (test.sh, test_*.py...): an input
            # fixture the environment legitimately shares with the tests is not an answer
            if folder in task.tests_dirs and path.suffix not in (".sh", ".py", ".js", ".ts"):
                continue
            data = path.read_bytes()
            if len(data) >= MIN_LEAK_BYTES:
                secrets[hashlib.sha256(data).hexdigest()] = str(path.relative_to(task.path))
    try:
        image = ensure_task_images(runtime, task, "doctor",
                                   ca_bundle=ca_bundle.read_bytes() if ca_bundle else None).task_image
    except BuildFailed as exc:
        return LeakScan(NOT_SCANNED, why=f"the image did not build ({last_telling_line(str(exc))})")
    except InfraError as exc:
        return LeakScan(NOT_SCANNED, why=f"the image could not be made: {last_telling_line(str(exc))}")
    name = f"orchestra-doctor-{hashlib.sha256(task.name.encode()).hexdigest()[:12]}-{int(time.time())}"
    spec = ContainerSpec(image=image, name=name, labels={"orchestra.kind": "doctor", "orchestra.job": "doctor"},
                         command=["sleep", str(SCAN_SECONDS + 60)], cpus=1.0, memory_mb=512, pids_limit=256,
                         network="none", entrypoint=["/bin/sh", "-c", "exec \"$@\"", "sh"])
    container = None
    try:
        container = runtime.create(spec)
        runtime.start(container)
        done = runtime.exec(container, ["python3", "-c", SCAN, json.dumps(sorted(secrets))],
                            deadline=time.time() + SCAN_SECONDS, capture=4_000_000, user="0")
    except InfraError as exc:
        return LeakScan(NOT_SCANNED, why=f"the engine failed: {last_telling_line(str(exc))}")
    finally:
        if container is not None:
            try:
                runtime.remove(container)
            except InfraError as exc:
                log.warning("doctor.scan_container_left", container=container, error=str(exc))
    return _read_scan(done, secrets)


def _read_scan(done: ExecResult, secrets: dict[str, str]) -> LeakScan:
    """The scan's output as a LeakScan (pure: unit-tested without an engine)."""
    output = done.output.decode(errors="replace").strip()
    if done.timed_out or done.exit_code is None:
        return LeakScan(NOT_SCANNED, why=f"the scan did not finish within {SCAN_SECONDS} s"
                        if done.timed_out else "the scan did not finish (its container stopped)")
    if done.exit_code != 0:
        if done.exit_code in (126, 127) and ("not found" in output or "no such file" in output.lower()):
            return LeakScan(NOT_SCANNED, why="no python3 in the image")
        return LeakScan(NOT_SCANNED, why=f"the scan exited {done.exit_code}: {last_telling_line(output) or '(no output)'}")
    try:
        report = json.loads(output.splitlines()[-1])
        found, future = dict(report["found"]), dict(report["future"])
        unread = list(report.get("unread", []))
    except (IndexError, ValueError, KeyError, TypeError):
        return LeakScan(NOT_SCANNED, why=f"the scan's output was not its report: {output[-200:] or '(none)'}")
    leaks = [f"the image holds {secrets.get(digest, digest[:12])} at {', '.join(paths[:3])}"
             for digest, paths in sorted(found.items())]
    unreadable = []
    for repo, count in sorted(future.items()):
        if isinstance(count, int):
            if count > 0:
                leaks.append(f"{repo}/.git holds {count} commit(s) past its HEAD (the repository's future)")
        else:
            unreadable.append(f"{repo}/.git's history not read ({count})")
    if unread:
        unreadable.append(f"folders not read: {', '.join(unread[:3])}" + (
            f" and {len(unread) - 3} more" if len(unread) > 3 else ""))
    if leaks:
        return LeakScan("leaky", leaks=leaks, why="; ".join(unreadable))
    if unreadable:
        return LeakScan(NOT_SCANNED, why="; ".join(unreadable))
    return LeakScan("clean")


_TELLING = re.compile(r"(failed|error|not found|no such|denied|unable|cannot|refused)", re.IGNORECASE)


def last_telling_line(text: str) -> str:
    """The line that says what went wrong: the last one that sounds like an error (a build
    log ends with the step it stopped at, not with why), else the last line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in lines if _TELLING.search(line)]
    return ((telling or lines)[-1] if lines else text)[:300]
