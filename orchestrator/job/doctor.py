"""`orchestra tasks doctor`: is each task able to measure an agent at all? (issue 25)

An oracle below 1.0 measures the harness, not the agent (a study of SWE-bench found most
instances no agent solved had broken environments). The doctor runs the oracle and nop
once on every task and classifies it:

  healthy        the oracle scores 1 and nop scores 0
  broken         the oracle scores below 1: the reason (build failed, an image stood in, a
                 test that needs a network this host lacks, a timeout, infeasible...)
  weak-test      nop scores above 0: the test passes without any work
  no-solution    no solution/solve.sh, so the oracle cannot tell (nop still runs)
  leaky          the built image holds the task's tests or solution (by content, at any
                 path), or a .git whose history has commits past its checked-out HEAD
  invalid        the task does not load (its problems, by file and field); nothing runs

Verdicts are cached by task content (plus orchestra's version and the bases' recipe) in
`$ORCHESTRA_CACHE/doctor/`, so a rerun of an unchanged dataset runs nothing; `orchestra
run --skip-broken` leaves out tasks the doctor found broken, leaky or no-solution.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import orchestrator
from orchestrator.job.options import JobOptions
from orchestrator.job.runner import run_job
from orchestrator.log import get_logger
from orchestrator.models.events import Observers
from orchestrator.models.manifest import default_manifest
from orchestrator.models.result import ERRORED, FailureMode, TrialResult
from orchestrator.paths import cache_root
from orchestrator.runtime.base import BuildFailed, ContainerSpec, Runtime
from orchestrator.tasks.load import Task
from orchestrator.trial.baseimage import BASE_VERSION
from orchestrator.trial.images import ensure_task_images
from orchestrator.util import write_json_atomic

log = get_logger()

VERDICTS = ("healthy", "broken", "weak-test", "no-solution", "leaky", "invalid")
SKIPPED_BY_RUN = {"broken", "no-solution", "leaky"}  # and invalid tasks, which never load
# What a verifier's or build's output says when it needed a network this host lacks.
NETWORK_SIGNS = re.compile(
    r"(Could not resolve host|Temporary failure in name resolution|Name or service not known|"
    r"certificate verify failed|CERTIFICATE_VERIFY_FAILED|Network is unreachable|"
    r"Connection refused|No matching distribution found|Failed to establish a new connection|"
    r"Could not connect to|unable to access 'https?://[^']+'|\bgetaddrinfo\b|"
    r"failed to resolve|dial tcp)", re.IGNORECASE)
NPM_OFFLINE = re.compile(r"\bENOTFOUND\b|\bEAI_AGAIN\b")  # npm's, case-sensitive: not FileNotFoundError
MISSING_FILE = re.compile(r"No such file or directory: '([^']+)'")
NOT_FOUND = re.compile(r"(?:^|\s)(\S+): (?:command )?not found", re.MULTILINE)
NO_MODULE = re.compile(r"No module named '?([\w.]+)")
FETCHES = re.compile(r"\b(pip3?|uv|uvx|curl|wget|npm|apt-get|git\s+clone)\b")


@dataclass
class Diagnosis:
    task: str
    path: str
    content_hash: str
    verdict: str
    reason: str
    oracle: float | None = None  # the oracle's headline reward (None: not graded / not run)
    nop: float | None = None
    stand_ins: list[dict] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    checked_at: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


RULES_VERSION = "2"  # bump when classify()'s reasons change: cached verdicts are then redone


def cache_key(task: Task) -> str:
    key = f"{task.content_hash}\0{orchestrator.__version__}\0{BASE_VERSION}\0{RULES_VERSION}"
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def cache_dir() -> Path:
    return cache_root() / "doctor"


def cached(task: Task) -> Diagnosis | None:
    path = cache_dir() / f"{cache_key(task)}.json"
    try:
        return Diagnosis(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def skipped_by_run(tasks: list[Task]) -> tuple[list[Task], list[Diagnosis]]:
    """`orchestra run --skip-broken`: the tasks to run, and the diagnoses of those left out."""
    keep, left = [], []
    for task in tasks:
        found = cached(task)
        if found is not None and found.verdict in SKIPPED_BY_RUN:
            left.append(found)
        else:
            keep.append(task)
    return keep, left


def invalid(problems: dict[Path, list[str]]) -> list[Diagnosis]:
    """Tasks that do not load, named with their problems (not cached: nothing ran)."""
    return [Diagnosis(task=f"{path.parent.name}/{path.name}", path=str(path), content_hash="",
                      verdict="invalid", reason="; ".join(p.replace(str(path) + "/", "") for p in found[:3]))
            for path, found in sorted(problems.items())]


def diagnose(runtime: Runtime, tasks: list[Task], jobs_dir: Path, *, n_concurrent: int = 2,
             ca_bundle: Path | None = None, refresh: bool = False,
             observers: Observers | None = None) -> list[Diagnosis]:
    """Every task's diagnosis: from the cache, or by running the oracle and nop now."""
    found = {t.name: cached(t) for t in tasks} if not refresh else {}
    todo = [t for t in tasks if found.get(t.name) is None]
    if todo:
        stamp = time.strftime("%Y-%m-%d__%H-%M-%S")
        def options(agent: str) -> JobOptions:
            return JobOptions(job_name=f"doctor-{stamp}-{agent}", jobs_dir=jobs_dir, k=1,
                              n_concurrent=n_concurrent, ca_bundle=ca_bundle, max_retries=1)

        solvable = [t for t in todo if t.has_solution]
        oracle = _run(runtime, solvable, "oracle", options("oracle"), observers) if solvable else {}
        nop = _run(runtime, todo, "nop", options("nop"), observers)
        for task in todo:
            diagnosis = classify(task, oracle.get(task.name), nop.get(task.name),
                                 jobs_dir / f"doctor-{stamp}-oracle")
            if diagnosis.verdict in ("healthy", "weak-test", "no-solution"):
                diagnosis.leaks = leak_preflight(runtime, task, ca_bundle)
                if diagnosis.leaks:
                    diagnosis.verdict = "leaky"
                    diagnosis.reason = "; ".join(diagnosis.leaks)
            diagnosis.checked_at = time.time()
            write_json_atomic(cache_dir() / f"{cache_key(task)}.json", diagnosis.as_dict())
            found[task.name] = diagnosis
    return [found[t.name] for t in tasks]  # type: ignore[misc]


def _run(runtime: Runtime, tasks: list[Task], agent: Literal["oracle", "nop"], options: JobOptions,
         observers: Observers | None) -> dict[str, TrialResult]:
    run_job(runtime, tasks, default_manifest(agent), options, observers)
    results = {}
    for path in (options.jobs_dir / options.job_name / "trials").glob("*/result.json"):
        result = TrialResult.model_validate_json(path.read_text())
        results[result.task] = result
    return results


def classify(task: Task, oracle: TrialResult | None, nop: TrialResult | None,
             oracle_job: Path) -> Diagnosis:
    """The verdict from the two trials (pure: unit-tested without an engine)."""
    d = Diagnosis(task=task.name, path=str(task.path), content_hash=task.content_hash,
                  verdict="healthy", reason="oracle 1, nop 0")
    if oracle is not None:
        d.stand_ins = oracle.stand_ins
        d.oracle = None if oracle.reward is None else oracle.headline
    if nop is not None:
        d.nop = None if nop.reward is None else nop.headline
    if not task.has_solution:
        d.verdict, d.reason = "no-solution", "no solution/solve.sh: the oracle cannot tell"
    elif oracle is None or oracle.headline < 1.0:
        d.verdict, d.reason = "broken", _why_broken(oracle, oracle_job, task)
        return d
    if d.nop is not None and d.nop > 0:
        d.verdict, d.reason = "weak-test", f"nop scores {d.nop:g} without doing anything"
    elif nop is not None and nop.failure_mode in ERRORED and d.verdict == "healthy":
        d.verdict, d.reason = "broken", f"nop: {nop.failure_mode.value}: {(nop.error or '')[:200]}"
    return d


def _why_broken(oracle: TrialResult | None, job_dir: Path, task: Task) -> str:
    if oracle is None:
        return "the oracle did not run"
    mode, error = oracle.failure_mode, (oracle.error or "").strip()
    stood = "; ".join(f"FROM {s['reference']} stood in by {s['stand_in']} (python {s['python']})"
                      for s in oracle.stand_ins)
    tail = _verifier_output(oracle, job_dir)
    if mode == FailureMode.BUILD_ERROR:
        sign = NETWORK_SIGNS.search(error) or NPM_OFFLINE.search(error)
        why = "build failed" + (f", needing a network this host lacks ({sign.group(0)})" if sign else "")
        return f"{why}: {_last_line(error)}" + (f" [{stood}]" if stood else "")
    if mode == FailureMode.INFEASIBLE:
        return f"infeasible here: {error}"
    if mode in (FailureMode.AGENT_TIMEOUT, FailureMode.VERIFIER_TIMEOUT):
        return f"{mode.value}: the oracle's solution or the test ran past its timeout"
    if mode != FailureMode.NONE:
        return f"{mode.value}: {_last_line(error)}"
    why = f"the oracle scores {oracle.headline:g}"
    if sign := NETWORK_SIGNS.search(tail) or NPM_OFFLINE.search(tail):
        why += f"; the test needs a network this host lacks ({sign.group(0)})"
    elif gone := MISSING_FILE.search(tail):
        why += f"; the test reads {gone.group(1)}, which the task does not ship"
    elif missing := NOT_FOUND.search(tail):
        why += f"; the test's `{missing.group(1)}` is not in the image"
    elif module := NO_MODULE.search(tail):
        why += f"; the test's python module `{module.group(1)}` is not in the image"
    tests = "\n".join((d / "test.sh").read_text(errors="replace") for d in task.tests_dirs
                      if (d / "test.sh").is_file())
    if task.config.network_for("verifier") == "no-network" and (fetch := FETCHES.search(tests)):
        why += (f"; test.sh fetches ({fetch.group(1)}) at grading time but the task gives its "
                "verifier no network (allow_internet = false / network_mode), here as in Harbor")
    if stood:
        why += f"; image stood in: {stood}"
    return why


def _verifier_output(oracle: TrialResult, job_dir: Path) -> str:
    for path in job_dir.glob(f"trials/*__{oracle.trial_id[:12]}/verifier/test-stdout.txt"):
        try:
            return path.read_text(errors="replace")[-20_000:]
        except OSError:
            return ""
    return ""


_TELLING = re.compile(r"(failed|error|not found|no such|denied|unable|cannot|refused)", re.IGNORECASE)


def _last_line(text: str) -> str:
    """The line that says what went wrong: the last one that sounds like an error (a build
    log ends with the step it stopped at, not with why), else the last line."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in lines if _TELLING.search(line)]
    return ((telling or lines)[-1] if lines else text)[:300]


# ---- leak preflight --------------------------------------------------------------------
SCAN = r"""
import hashlib, json, os, subprocess, sys
want, found, gits = set(json.loads(sys.argv[1])), {}, []
for top in ("/",):
    for root, dirs, files in os.walk(top):
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
future = {}
for repo in gits:
    try:
        out = subprocess.run(["git", "-C", repo, "rev-list", "--all", "--not", "HEAD", "--count"],
                             capture_output=True, text=True, timeout=30)
        future[repo] = int(out.stdout.strip()) if out.returncode == 0 else "unreadable"
    except (OSError, ValueError, subprocess.TimeoutExpired):
        future[repo] = "no git in the image"
print(json.dumps({"found": found, "future": future}))
"""
MIN_LEAK_BYTES = 64  # a tiny file (an empty __init__.py, "#!/bin/bash") proves nothing


def leak_preflight(runtime: Runtime, task: Task, ca_bundle: Path | None = None) -> list[str]:
    """What the task's built image holds that it must not: its tests or solution files (by
    content, at any path), or a git history past its HEAD. An image without python3 is
    not scanned (said)."""
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
    except BuildFailed:
        return []  # the oracle's verdict already said the build failed
    name = f"orchestra-doctor-{hashlib.sha256(task.name.encode()).hexdigest()[:12]}-{int(time.time())}"
    spec = ContainerSpec(image=image, name=name, labels={"orchestra.kind": "doctor", "orchestra.job": "doctor"},
                       command=["sleep", "600"], cpus=1.0, memory_mb=512, pids_limit=256, network="none",
                       entrypoint=["/bin/sh", "-c", "exec \"$@\"", "sh"])
    container = runtime.create(spec)
    try:
        runtime.start(container)
        done = runtime.exec(container, ["python3", "-c", SCAN, json.dumps(sorted(secrets))],
                            deadline=time.time() + 300, capture=4_000_000, user="0")
        if done.exit_code != 0:
            return [] if b"not found" not in done.output else ["image not scanned: no python3 in it"]
        report = json.loads(done.output.decode(errors="replace").strip().splitlines()[-1])
    finally:
        runtime.remove(container)
    leaks = [f"the image holds {secrets[digest]} at {', '.join(paths[:3])}"
             for digest, paths in sorted(report["found"].items())]
    for repo, count in sorted(report["future"].items()):
        if isinstance(count, int) and count > 0:
            leaks.append(f"{repo}/.git holds {count} commit(s) past its HEAD (the repository's future)")
    return leaks
