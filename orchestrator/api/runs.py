"""The API of `orchestra run` (the package orchestrator.api is its face): what it does, without the command line.

    from orchestrator.api import RunRequest, run

    outcome = run(RunRequest(path=Path("tasks/examples"), agent="oracle"))
    outcome.job.mean_reward, outcome.exit_code, outcome.job_dir

`RunRequest` holds `orchestra run`'s options as fields, with the CLI's defaults (a unit test
holds the two together; `orchestra run --help` says what each does). `run` checks them, loads
the tasks and the line-up, reads the baseline, runs the job, judges it (answer leaks, the
regression gate) and returns a `RunOutcome`. The CLI parses, calls `run` and renders; every
decision about the job is made here, so a pipeline written in Python gets the same job, the
same verdict and the same exit code as the CLI without a subprocess.

Errors are orchestra's (errors.py): `InputError` (the CLI's exit 2) names the flag or the
file before anything runs, `InfraError` (exit 3) is the engine or the host. A verdict is not
an error: a failed gate and an answer leak are the outcome's `exit_code`. KeyboardInterrupt
passes through; the job folder then holds what finished, and `resume` continues it.

What stays with the caller, because it is process-wide: logging (the CLI writes the job's
events.jsonl through `orchestrator.log.configure`, from `on_start`), signal handlers, and the
environment variables the CLI reads for two options (ORCHESTRA_REGISTRY, ORCHESTRA_CA_BUNDLE).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.api.baseline import gate_names, read_baseline
from orchestrator.api.resume import take_over_resumed
from orchestrator.api.say import Say, silent
from orchestrator.errors import InputError
from orchestrator.models import JobSource
from orchestrator.paths import JobDir
from orchestrator.runtime import trust_registry

if TYPE_CHECKING:
    from orchestrator.job import JobOptions
    from orchestrator.models import JobResult, Manifest, Observers, TrialResult
    from orchestrator.report import Gate
    from orchestrator.tasks import Task

# The outcome's exit codes (the CLI's; its bad input, 2, and infrastructure, 3, are raised)
DONE = 0  # the job completed, whatever the rewards
GATE_FAILED = 1  # the gate asked for (fail_on_regression) found a regression
GATE_REFUSED = 2  # the job ran, but the gate had nothing it could judge (gate_refused says why)
ANSWER_LEAK = 4  # an agent read what grades it: the suite stopped, its results are void

class RunRequest(BaseModel):
    """`orchestra run`'s options, one field per flag (`--n-concurrent` is `n_concurrent`),
    with its defaults. Only how the CLI shows a job (--json, --quiet, --progress-json,
    --verbose) is not here: the outcome carries what they show."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None  # a task folder or a dataset (required, unless resume gives it)
    manifest: Path | None = None
    agent: str | None = None
    n_concurrent: int = Field(4, ge=1)
    k: int | str | None = None  # attempts per task; None: per layer; "auto": against the baseline
    layer: Literal["regression", "workflow"] | None = None
    jobs_dir: Path = Path("jobs")
    job_name: str | None = None  # None: a timestamp
    resume: Path | None = None  # a job folder: its own tasks, line-up, policy, layer and k
    retry_errors: bool = False
    policy: Literal["memory-on", "memory-off"] = "memory-on"
    endpoints: list[Path] | None = None  # None: every endpoints/*.json
    model: str | None = None
    replay_from: Path | None = None
    max_retries: int = Field(2, ge=0)
    image_budget_gb: float | None = Field(None, ge=0)
    order: Literal["longest-first", "given"] = "longest-first"
    engine_wait: float = Field(300.0, ge=0)
    max_cpus: float | None = None
    max_memory_mb: int | None = None
    admission: Literal["reserve", "cpu-limit"] | None = None
    build_ahead: int | None = Field(None, ge=0)
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    oci_runtime: str | None = None
    build_policy: Literal["prefer-prebuilt", "build", "pull"] = "prefer-prebuilt"
    bases: Literal["auto", "pull", "offline"] | None = None
    require: list[str] | None = None
    registry: str | None = None
    ca_bundle: Path | None = None
    baseline: Path | None = None  # a job folder: the regression gate after the run
    fail_on_regression: bool = False
    gate_layer: str | None = None
    flaky: Literal["gate", "report", "ignore"] = "report"
    alpha: float = 0.05
    detect_drop: float = 0.5
    allow_changed: bool = False
    skip_broken: bool = False
    task_env: list[str] | None = None
    registry_auth: list[str] | None = None  # registries whose credentials builds and pulls may send
    trust_job_endpoints: bool = False


@dataclass
class RunOutcome:
    """What a run gave: the job's result and its trials, the gate's verdict when a baseline
    was given, and the exit code the CLI ends with. A dataclass of pydantic objects, not a
    model: orchestra makes it, nothing validates it, and building a model of the gate's
    types would cost every `orchestra run` ~8 ms of start-up (report.gate loads only with a
    baseline)."""

    request: RunRequest  # as run: the job's name filled in, a resumed job's own options taken
    job_dir: Path
    job: JobResult
    trials: list[TrialResult]  # each trial's full result, as written in the job folder
    gate: Gate | None = None  # with a baseline (None after an answer leak: nothing is judged)
    gate_refused: list[str] = field(default_factory=list)  # why the gate judged nothing
    exit_code: int = DONE  # DONE, GATE_FAILED, GATE_REFUSED or ANSWER_LEAK
    notes: list[str] = field(default_factory=list)  # what the CLI prints on stderr before the run


def run(request: RunRequest, *, observers: Observers | None = None, notes: Say | None = None,
        on_start: Callable[[Path], None] | None = None) -> RunOutcome:
    """Run the job `request` describes and judge it.

    Args:
        request: the options.
        observers: told the job's lifecycle events (models/events.py), as the CLI's progress is.
        notes: called with each note as it comes (ignored task keys, -k auto's choice, what a
            resumed job's endpoint files say); all are also in the outcome's `notes`.
        on_start: called with the job folder once everything is checked, the tasks are loaded
            and the folder is held, before the engine is opened (the CLI starts its event log,
            signal handlers and progress display there).

    Raises:
        InputError: a bad option, task, manifest, endpoint or baseline, named; nothing has run.
        InfraError: the engine or the host failed (the job folder keeps what finished).
    """
    from orchestrator.job import hold_job, run_job
    from orchestrator.runtime import open_runtime

    said: list[str] = []

    def note(text: str) -> None:
        said.append(text)
        (notes or silent)(text)

    a = request.model_copy(deep=True)
    with contextlib.ExitStack() as held:  # one writer per job folder, for the whole run
        resumed, from_resume = JobSource(), None
        if a.resume is not None:
            held.enter_context(hold_job(a.resume))  # at once: before anything is read
            a, resumed, from_resume = take_over_resumed(a, note)
        name, attempts = _check(a)
        a = a.model_copy(update={"job_name": name})
        lineup = _allow_task_env(a, _lineup(a, from_resume))  # before tasks load: their ${VAR}s read it
        for registry in a.registry_auth or []:  # the user's: a dataset's FROM elsewhere gets none
            trust_registry(registry)
        tasks = _tasks(a, note)
        options = _job_options(a, name, attempts, resumed)
        baseline_trials = read_baseline(a, options, tasks, note)
        job_dir = a.jobs_dir / name
        if a.resume is None:
            held.enter_context(hold_job(job_dir))
        if on_start is not None:
            on_start(job_dir)
        runtime = open_runtime(max_pool_size=a.n_concurrent * 3 + 8)
        job = run_job(runtime, tasks, lineup, options, observers)
        return _judge(a, job, job_dir, baseline_trials, said)


def _judge(a: RunRequest, job: JobResult, job_dir: Path, baseline_trials: list[TrialResult] | None,
           said: list[str]) -> RunOutcome:
    """The verdicts on a finished job: an answer leak voids it (nothing else is judged), then
    the regression gate against the baseline, its verdict written to regressions.json."""
    from orchestrator.models import TrialResult
    from orchestrator.util import write_json_atomic

    trials = [TrialResult.model_validate_json(p.read_text())
              for p in JobDir(job_dir).trial_results()]
    outcome = RunOutcome(request=a, job_dir=job_dir, job=job, trials=trials, notes=said)
    if job.counts.get("answer_leak", 0):
        outcome.exit_code = ANSWER_LEAK
        return outcome
    if a.baseline is None or baseline_trials is None:
        return outcome
    from orchestrator.report.gate import gate

    try:
        verdict = gate(trials, baseline_trials, a.allow_changed, a.gate_layer, a.flaky, a.alpha,
                       names=gate_names(a))
    except InputError as exc:  # the job's results are written; only the gate refuses
        outcome.gate_refused, outcome.exit_code = exc.problems, GATE_REFUSED
        return outcome
    write_json_atomic(job_dir / "regressions.json", verdict.as_dict())
    outcome.gate = verdict
    if a.fail_on_regression and verdict.failed:
        outcome.exit_code = GATE_FAILED
    return outcome


def _check(a: RunRequest) -> tuple[str, int | None]:
    """Every option that can be checked before anything runs, named by its flag. Returns the
    job's name and the attempts (None: per layer, or -k auto against the baseline)."""
    from orchestrator.job import REQUIRABLE
    from orchestrator.models import AGENT_NAMES, is_agent_kind
    from orchestrator.util import check_job_name, registry_problem

    if a.path is None:
        raise InputError("--path: required (a task folder or a dataset)")
    k = None if a.k is None else str(a.k)
    attempts = None if k is None or k == "auto" else _positive_int("-k", k)
    if k == "auto" and a.baseline is None:
        raise InputError("-k auto: needs --baseline JOB_DIR (the attempts are chosen against it)")
    if not 0 < a.detect_drop <= 1:
        raise InputError(f"--detect-drop: {a.detect_drop} is not a drop in pass rate between 0 and 1")
    if a.fail_on_regression and a.baseline is None:
        raise InputError("--fail-on-regression: needs --baseline JOB_DIR")
    # to the second plus a random tail: two jobs started in one second never share a name
    name = a.job_name or dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S-") + os.urandom(2).hex()
    if (problem := check_job_name(name)) is not None:
        raise InputError(f"--job-name: {problem}")
    if a.ca_bundle is not None and not a.ca_bundle.is_file():
        raise InputError(f"--ca-bundle: {a.ca_bundle}: no such file")
    if a.replay_from is not None and not _recorded_exchanges(a.replay_from):
        raise InputError(f"--replay-from: {a.replay_from}: no recorded exchanges "
                         "(trial folders with model/exchanges.jsonl) there")
    if a.retry_errors and a.resume is None:
        raise InputError("--retry-errors: only with --resume JOB_DIR")
    # typer and the request's types hold these already; a resumed job's config.json does not
    choices = {"--order": (a.order, ("longest-first", "given")),
               "--build-policy": (a.build_policy, ("prefer-prebuilt", "build", "pull")),
               "--policy": (a.policy, ("memory-on", "memory-off")),
               "--backend": (a.backend, ("local", "ray"))}
    for flag, (value, allowed) in choices.items():
        if value not in allowed:
            raise InputError(f"{flag}: {value!r} is not {', '.join(allowed[:-1])} or {allowed[-1]}")
    if a.registry is not None and (problem := registry_problem(a.registry)) is not None:
        raise InputError(f"--registry: {problem}")
    if unknown := [r for r in a.require or [] if r not in REQUIRABLE]:
        raise InputError(f"--require {unknown[0]}: not a capability (choose from: {', '.join(REQUIRABLE)})")
    if a.agent is not None and not is_agent_kind(a.agent):
        raise InputError(f"--agent: {a.agent!r} is not one of {', '.join(AGENT_NAMES)} "
                         "(`orchestra agents` lists them)")
    if a.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise InputError("--backend ray: Ray is not installed (pip install 'orchestra[ray]')") from None
    if a.layer is not None and a.layer not in ("regression", "workflow"):
        raise InputError(f"--layer: {a.layer!r} is not regression or workflow")
    if a.resume is None and JobDir(a.jobs_dir / name).result.exists():
        raise InputError(f"{a.jobs_dir / name}: a finished job is already there; choose another "
                         "--job-name or --resume it (nothing was overwritten)")
    _writable(a.jobs_dir)
    return name, attempts


def _recorded_exchanges(job: Path) -> bool:
    """Whether a job folder holds a trial with recorded model exchanges (what --replay-from
    reads: services/exchanges.py)."""
    from orchestrator.services import RECORD

    return any((folder / RECORD).is_file() for folder in JobDir(job).trial_folders())


def _tasks(a: RunRequest, note: Say = silent) -> list[Task]:
    """The tasks under path (with skip_broken, without those the doctor found unfit),
    narrowed to layer; the keys Harbor ignores are said."""
    from orchestrator.tasks import load_tasks

    assert a.path is not None
    if a.skip_broken:
        from orchestrator.job import invalid, skipped_by_run
        from orchestrator.tasks import load_tasks_lenient

        tasks, problems = load_tasks_lenient(a.path)
        plan = skipped_by_run(tasks, a.ca_bundle)
        if said := plan.note(a.path, a.ca_bundle):
            note(said)
        tasks, left = plan.keep, plan.left + invalid(problems)
    else:
        tasks = load_tasks(a.path)
    _note_ignored_fields(tasks, note)
    if a.skip_broken:
        if left:
            note(f"--skip-broken: {len(left)} task(s) the doctor found unable to measure an "
                 f"agent are left out: " + ", ".join(f"{d.task} ({d.verdict})" for d in left[:10])
                 + (f" and {len(left) - 10} more" if len(left) > 10 else ""))
        if not tasks:
            raise InputError(f"{a.path}: --skip-broken left no task to run (`orchestra tasks doctor` says why)")
    if a.layer is not None:
        tasks = [t for t in tasks if t.config.metadata.evaluation_layer == a.layer]
        if not tasks:
            raise InputError(f"{a.path}: no task has [metadata] evaluation_layer = {a.layer!r}")
    return tasks


def _lineup(a: RunRequest, from_resume: Manifest | None = None) -> Manifest:
    """The manifest (the resumed job's, the request's, or one agent's), with agent / model."""
    from orchestrator.models import default_manifest, is_agent_kind, load_manifest

    agent = a.agent if a.agent is not None and is_agent_kind(a.agent) else None  # _check held it
    if from_resume is not None:
        lineup = from_resume
    elif a.manifest:
        lineup = load_manifest(a.manifest)
    else:
        lineup = default_manifest(agent or ("reference" if a.model else "oracle"))
    if agent:
        lineup = lineup.with_agent(agent)
    if a.model:
        lineup = lineup.with_endpoint(a.model)
    lead = lineup.orchestrator
    if lead.agent == "command" and not lead.command:
        raise InputError("--agent command: the command agent needs a run template; write a "
                         "manifest with `command:` (and `install:`) for the orchestrator")
    return lineup


def _allow_task_env(a: RunRequest, lineup: Manifest) -> Manifest:
    """task_env joins the manifest's sandbox.task_env: the only host variables a task's
    `${VAR}` may read (DESIGN 4). orchestra's own secrets are refused by name (exit 2):
    ORCHESTRA_* and the key variable of every endpoint in the endpoint config."""
    import re

    from orchestrator.models import default_endpoint_files, load_endpoints
    from orchestrator.tasks import allow_host_env

    given = list(a.task_env or [])
    for name in given:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(f"--task-env {name!r}: not a variable name")
    names = sorted(set(lineup.sandbox.task_env) | set(given))
    files = [p.resolve() for p in (a.endpoints or default_endpoint_files())]
    keys = {e.api_key_env for e in load_endpoints(files).endpoints.values() if e.api_key_env} if files else set()
    for name in names:
        where = "--task-env" if name in given else "manifest: field 'sandbox.task_env'"
        if name.startswith("ORCHESTRA_") or name in keys:
            raise InputError(f"{where} {name}: orchestra's own secret (an endpoint's key or an "
                             "ORCHESTRA_ variable) is never given to a task")
    allow_host_env(names)
    if given and set(names) != set(lineup.sandbox.task_env):
        sandbox = lineup.sandbox.model_copy(update={"task_env": names})
        lineup = lineup.model_copy(update={"sandbox": sandbox})
    return lineup


def _job_options(a: RunRequest, name: str, attempts: int | None, resumed: JobSource) -> JobOptions:
    from orchestrator.job import JobOptions
    from orchestrator.models import default_endpoint_files, load_endpoints

    assert a.path is not None
    endpoint_files = [p.resolve() for p in (a.endpoints or default_endpoint_files())]
    if a.resume is not None:
        manifest_dir = Path(resumed.manifest_dir) if resumed.manifest_dir else None
    else:
        manifest_dir = a.manifest.parent.resolve() if a.manifest else None
    return JobOptions(
        job_name=name, jobs_dir=a.jobs_dir, n_concurrent=a.n_concurrent, k=attempts, policy=a.policy,
        manifest_dir=manifest_dir, max_retries=a.max_retries, engine_wait=a.engine_wait,
        longest_first=a.order == "longest-first", image_budget_gb=a.image_budget_gb,
        max_cpus=a.max_cpus, max_memory_mb=a.max_memory_mb, admission=a.admission, build_workers=a.build_ahead,
        resume=a.resume is not None,
        oci_runtime=a.oci_runtime, retry_errors=a.retry_errors, ca_bundle=a.ca_bundle,
        build_policy=a.build_policy, bases=a.bases, registry=a.registry, require=list(a.require or []),
        backend=a.backend, ray_address=a.ray_address, replay_from=a.replay_from,
        endpoints=load_endpoints(endpoint_files) if endpoint_files else None,
        source=JobSource(path=str(a.path.resolve()), layer=a.layer, endpoints=[str(p) for p in endpoint_files],
                         manifest_dir=str(manifest_dir) if manifest_dir else None))


def _positive_int(option: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"{option}: {value!r} is not a whole number of attempts (1 or more) or 'auto'")
    return int(value)


def _writable(jobs_dir: Path) -> None:
    """A jobs folder results can be written to, checked before anything runs (exit 2)."""
    import tempfile

    try:
        jobs_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=jobs_dir, prefix=".orchestra-probe-"):
            pass
    except OSError as exc:
        raise InputError(f"--jobs-dir: {jobs_dir}: results cannot be written there "
                         f"({exc.strerror or exc})") from None


def _note_ignored_fields(tasks: list[Task], note: Say = silent) -> None:
    """Keys Harbor ignores are accepted, never silently: one note per set of keys (and per
    schema warning), naming its tasks (each result.json records its own)."""
    lines: dict[str, list[str]] = {}
    for task in tasks:
        if task.ignored_fields:
            label = f"note: ignored (Harbor ignores them too): {', '.join(task.ignored_fields)}"
            lines.setdefault(label, []).append(task.name)
        if task.schema_warning:
            lines.setdefault(f"warning: {task.schema_warning}", []).append(task.name)
    for label, names in lines.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        note(f"{label}: {shown}")
