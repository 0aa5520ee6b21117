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
  not-scanned    oracle 1 and nop 0, but the leak scan could not look (no python3 in the
                 image, the scan failed or timed out, a .git history it could not read,
                 the engine failed): the reason is said; neither leaky nor clean
  invalid        the task does not load (its problems, by file and field); nothing runs

Each diagnosis also says its leak scan (job/leakscan.py): `clean`, `leaky`, `not scanned: <why>`, or empty
when there was nothing to scan (the oracle's verdict came first). A weak-test or
no-solution task whose scan could not look keeps its verdict, the reason saying so.

Verdicts are cached by task content, plus every option that changes a verdict (the CA
bundle's content), orchestra's version and the bases' recipe, in `$ORCHESTRA_CACHE/doctor/`,
so a rerun of an unchanged dataset runs nothing; `orchestra run --skip-broken` (with the
same --ca-bundle) leaves out tasks the doctor found broken, leaky or no-solution; a
not-scanned task runs.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer

import orchestrator
from orchestrator.job.leakscan import NOT_SCANNED, LeakScan, last_telling_line, leak_preflight
from orchestrator.job.options import JobOptions
from orchestrator.job.runner import run_job
from orchestrator.log import get_logger
from orchestrator.models import (
    ERRORED,
    FailureMode,
    Observers,
    StandInRecord,
    TrialResult,
    default_manifest,
)
from orchestrator.paths import JobDir, TrialDir, cache_root
from orchestrator.runtime import Runtime
from orchestrator.tasks import Task, search_file, task_defects
from orchestrator.trial import BASE_VERSION
from orchestrator.util import JsonObject, write_json_atomic

log = get_logger()

VERDICTS = ("healthy", "broken", "weak-test", "no-solution", "leaky", "not-scanned", "invalid")
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


class Diagnosis(BaseModel):
    """One task's verdict, as `tasks doctor --json` prints it and its cache file holds it."""

    model_config = ConfigDict(extra="forbid")  # a cache entry of another shape is redone

    task: str
    path: str
    content_hash: str
    verdict: str
    reason: str
    oracle: float | None = None  # the oracle's headline reward (None: not graded / not run)
    nop: float | None = None
    stand_ins: list[StandInRecord] = Field(default_factory=list)  # the oracle's trial's
    leaks: list[str] = Field(default_factory=list)
    leak_scan: str = ""  # clean | leaky | not scanned: <why> | "" (not scanned: nothing to scan)
    checked_at: float = 0.0

    @field_serializer("stand_ins")
    def _stand_ins_as_before(self, stand_ins: list[StandInRecord]) -> list[JsonObject]:
        """Written without their empty fields (no `warning: null`), as the doctor always did."""
        return [s.model_dump(exclude_none=True) for s in stand_ins]


RULES_VERSION = "3"  # bump when classify()'s reasons change: cached verdicts are then redone


def cache_key(task: Task, ca_bundle: Path | None = None) -> str:
    """The task's content and every doctor option that changes a verdict: the CA bundle
    (by content: a build behind a TLS-intercepting proxy fails without it). The others
    (--n-concurrent, --jobs-dir, --json, --verbose, --refresh) change no verdict."""
    ca = hashlib.sha256(ca_bundle.read_bytes()).hexdigest() if ca_bundle is not None else "-"
    key = f"{task.content_hash}\0{orchestrator.__version__}\0{BASE_VERSION}\0{RULES_VERSION}\0ca={ca}"
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def cache_dir() -> Path:
    return cache_root() / "doctor"


def cached(task: Task, ca_bundle: Path | None = None) -> Diagnosis | None:
    path = cache_dir() / f"{cache_key(task, ca_bundle)}.json"
    try:
        return Diagnosis.model_validate_json(path.read_text())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


@dataclass
class SkipPlan:
    """`orchestra run --skip-broken`'s answer: the tasks to run, the diagnoses of those left
    out, and the tasks the doctor has no verdict for (never checked, changed since, or
    checked with another --ca-bundle): they run unchecked."""
    keep: list[Task]
    left: list[Diagnosis]
    unchecked: list[Task]

    def note(self, path: Path, ca_bundle: Path | None = None) -> str | None:
        """What --skip-broken says on stderr when it could not judge some tasks."""
        if not self.unchecked:
            return None
        doctor = f"`orchestra tasks doctor {path}" + (f" --ca-bundle {ca_bundle}`" if ca_bundle else "`")
        checked = len(self.keep) + len(self.left) - len(self.unchecked)
        if checked == 0:
            return (f"--skip-broken: no doctor verdicts exist for {path} (none of its "
                    f"{len(self.unchecked)} task(s) was checked as it is now"
                    + (", with this --ca-bundle" if ca_bundle else "") + "), so nothing is left "
                    f"out for being broken; {doctor} makes them (cached; then run again)")
        names = ", ".join(t.name for t in self.unchecked[:5]) + (
            f" and {len(self.unchecked) - 5} more" if len(self.unchecked) > 5 else "")
        return (f"--skip-broken: {len(self.unchecked)} task(s) have no doctor verdict (never "
                f"checked, or changed since) and run unchecked: {names}; {doctor} makes them")


def skipped_by_run(tasks: list[Task], ca_bundle: Path | None = None) -> SkipPlan:
    """`orchestra run --skip-broken`: the tasks to run, the diagnoses of those left out, and
    those without a verdict. A not-scanned task runs: the scan could not look, which says
    nothing against the task."""
    plan = SkipPlan([], [], [])
    for task in tasks:
        found = cached(task, ca_bundle)
        if found is not None and found.verdict in SKIPPED_BY_RUN:
            plan.left.append(found)
            continue
        plan.keep.append(task)
        if found is None:
            plan.unchecked.append(task)
    return plan


def invalid(problems: dict[Path, list[str]]) -> list[Diagnosis]:
    """Tasks that do not load, named with their problems (not cached: nothing ran)."""
    return [Diagnosis(task=f"{path.parent.name}/{path.name}", path=str(path), content_hash="",
                      verdict="invalid", reason="; ".join(p.replace(str(path) + "/", "") for p in found[:3]))
            for path, found in sorted(problems.items())]


def diagnose(runtime: Runtime, tasks: list[Task], jobs_dir: Path, *, n_concurrent: int = 2,
             ca_bundle: Path | None = None, refresh: bool = False,
             observers: Observers | None = None) -> list[Diagnosis]:
    """Every task's diagnosis: from the cache, or by running the oracle and nop now."""
    found = {t.name: cached(t, ca_bundle) for t in tasks} if not refresh else {}
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
                _judge_leaks(diagnosis, leak_preflight(runtime, task, ca_bundle))
            diagnosis.checked_at = time.time()
            write_json_atomic(cache_dir() / f"{cache_key(task, ca_bundle)}.json", diagnosis)
            found[task.name] = diagnosis
    return [found[t.name] for t in tasks]  # type: ignore[misc]


def _judge_leaks(diagnosis: Diagnosis, scan: LeakScan) -> None:
    """The leak scan's finding on a diagnosis: a leak found makes it leaky (whatever else
    the scan could not read); a scan that could not look makes a healthy task
    not-scanned, and is said in any other verdict's reason. Never leaky, never clean,
    for what was not looked at."""
    diagnosis.leaks = list(scan.leaks)
    diagnosis.leak_scan = scan.status if scan.status != NOT_SCANNED else f"{NOT_SCANNED}: {scan.why}"
    if scan.leaks:
        diagnosis.verdict, diagnosis.reason = "leaky", "; ".join(scan.leaks)
    elif scan.status == NOT_SCANNED:
        if diagnosis.verdict == "healthy":
            diagnosis.verdict = "not-scanned"
        diagnosis.reason += f"; leak scan not done: {scan.why}"


def _run(runtime: Runtime, tasks: list[Task], agent: Literal["oracle", "nop"], options: JobOptions,
         observers: Observers | None) -> dict[str, TrialResult]:
    run_job(runtime, tasks, default_manifest(agent), options, observers)
    results = {}
    for path in JobDir(options.jobs_dir / options.job_name).trial_results():
        result = TrialResult.model_validate_json(path.read_text())
        results[result.task] = result
    return results


def classify(task: Task, oracle: TrialResult | None, nop: TrialResult | None,
             oracle_job: Path) -> Diagnosis:
    """The verdict from the two trials (pure: unit-tested without an engine)."""
    d = Diagnosis(task=task.name, path=str(task.path), content_hash=task.content_hash,
                  verdict="healthy", reason="oracle 1, nop 0")
    if oracle is not None:
        d.stand_ins = list(oracle.stand_ins)
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
    """Why the oracle failed, and what the task folder itself gets wrong (its own defect,
    said as such: a script run without its run bit, a step reaching outside its folder)."""
    why = _why_oracle_failed(oracle, job_dir, task)
    if defects := task_defects(task):
        why += "; the task's own defect: " + "; ".join(defects)
    return why


def _why_oracle_failed(oracle: TrialResult | None, job_dir: Path, task: Task) -> str:
    if oracle is None:
        return "the oracle did not run"
    mode, error = oracle.failure_mode, (oracle.error or "").strip()
    stood = "; ".join(f"FROM {s.reference} stood in by {s.stand_in} (python {s.python})"
                      for s in oracle.stand_ins)
    tail = _verifier_output(oracle, job_dir)
    if mode == FailureMode.BUILD_ERROR:
        own = error.split("\n[built on:")[0]  # the base's failed pull is said there, not the build's
        sign = NETWORK_SIGNS.search(own) or NPM_OFFLINE.search(own)
        why = "build failed" + (f", needing a network this host lacks ({sign.group(0)})" if sign else "")
        return f"{why}: {last_telling_line(error)}" + (f" [{stood}]" if stood else "")
    if mode == FailureMode.INFEASIBLE:
        return f"infeasible here: {error}"
    if mode in (FailureMode.AGENT_TIMEOUT, FailureMode.VERIFIER_TIMEOUT):
        return f"{mode.value}: the oracle's solution or the test ran past its timeout"
    if mode != FailureMode.NONE:
        return f"{mode.value}: {last_telling_line(error)}"
    why = f"the oracle scores {oracle.headline:g}"
    if sign := NETWORK_SIGNS.search(tail) or NPM_OFFLINE.search(tail):
        why += f"; the test needs a network this host lacks ({sign.group(0)})"
    elif gone := MISSING_FILE.search(tail):
        why += f"; the test reads {gone.group(1)}, which the task does not ship"
    elif missing := NOT_FOUND.search(tail):
        why += f"; the test's `{missing.group(1)}` is not in the image"
    elif module := NO_MODULE.search(tail):
        why += f"; the test's python module `{module.group(1)}` is not in the image"
    elif said := _said(tail):
        why += f"; the test says: {said}"
    fetch = next(filter(None, (search_file(d / "test.sh", FETCHES) for d in task.tests_dirs
                               if (d / "test.sh").is_file())), None)  # a chunk at a time
    if task.config.network_for("verifier") == "no-network" and fetch:
        why += (f"; test.sh fetches ({fetch.group(1)}) at grading time but the task gives its "
                "verifier no network (allow_internet = false / network_mode), here as in Harbor")
    if stood:
        why += f"; image stood in: {stood}"
    return why


def _verifier_output(oracle: TrialResult, job_dir: Path) -> str:
    """What test.sh printed: the trial's, or each step's (a multi-step task grades in
    steps/<name>/verifier/), the last 20 kB of each."""
    found = []
    folder = JobDir(job_dir).find_trial(oracle.trial_id)
    if folder is not None:
        trial = TrialDir(folder)
        for path in sorted([trial.verifier_stdout, *trial.step_verifier_stdouts()]):
            try:
                found.append(path.read_text(errors="replace")[-20_000:])
            except OSError:
                continue
    return "\n".join(found)


def _said(output: str) -> str:
    """The test's own last words when they are not a pytest summary or a reward (a
    message a task's test.sh prints on failure, e.g. 'blocked despite the allowlist')."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    words = [line for line in lines if not re.fullmatch(r"[\d.]+|=+.*=+|[.FEsx]+.*", line)]
    return words[-1][:200] if words else ""
