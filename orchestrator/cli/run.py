"""`orchestra run`, after typer has parsed it: the arguments as one typed object (RunArgs),
checked and turned into a job in small steps (resume, checks, tasks, lineup, options,
baseline), the job run with its progress, then rendered and gated. Every refusal is an
InputError naming the flag or file (exit 2) before anything runs."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from orchestrator.cli.app import configure_logs, err, fail, human_console
from orchestrator.cli.commands import _report_gate
from orchestrator.errors import InfraError, InputError
from orchestrator.models.jobconfig import JobSource

if TYPE_CHECKING:
    from orchestrator.job.options import JobOptions
    from orchestrator.models.manifest import Manifest
    from orchestrator.models.result import JobResult, TrialResult
    from orchestrator.tasks.load import Task


@dataclass
class RunArgs:
    """`orchestra run`'s flags as typer parsed them (`orchestra run --help` says each)."""

    path: Path | None
    manifest: Path | None
    agent: str | None
    n_concurrent: int
    k: str | None
    layer: str | None
    jobs_dir: Path
    job_name: str | None
    resume: Path | None
    retry_errors: bool
    policy: str
    endpoints: list[Path] | None
    model: str | None
    replay_from: Path | None
    max_retries: int
    image_budget_gb: float | None
    order: str
    engine_wait: float
    max_cpus: float | None
    max_memory_mb: int | None
    admission: str | None
    build_ahead: int
    backend: str
    ray_address: str | None
    oci_runtime: str | None
    build_policy: str
    bases: str | None
    require: list[str] | None
    registry: str | None
    ca_bundle: Path | None
    json_out: str | None
    baseline: Path | None
    fail_on_regression: bool
    gate_layer: str | None
    flaky: str
    alpha: float
    detect_drop: float
    allow_changed: bool
    skip_broken: bool
    quiet: bool
    progress_json: bool
    verbose: bool
    task_env: list[str] | None = None  # --task-env: host variables tasks may read
    trust_job_endpoints: bool = False  # --resume: the job folder's endpoint files over yours
    # filled in on the way
    resumed: JobSource = field(default_factory=JobSource)  # the resumed job's config.json's source
    lineup_from_resume: Manifest | None = None


def execute(a: RunArgs) -> None:
    from orchestrator.job.joblock import hold_job

    with contextlib.ExitStack() as held:  # one writer per job folder, for the whole run
        try:
            if a.resume is not None:
                held.enter_context(hold_job(a.resume))  # at once: before anything is read
                _take_over_resumed(a)
            name, attempts = _check(a)
            lineup = _allow_task_env(a, _lineup(a))  # before tasks load: their ${VAR}s read it
            tasks = _tasks(a)
            options = _job_options(a, name, attempts)
            baseline_trials = _read_baseline(a, options, tasks)
            if a.resume is None:
                held.enter_context(hold_job(a.jobs_dir / name))
            job = _run(a, tasks, lineup, options)
        except (InputError, InfraError) as exc:
            fail(exc)
        except KeyboardInterrupt:
            job_dir = a.jobs_dir / (a.job_name or "")
            err.print(f"[yellow]cancelled[/]: {_cancel_counts(job_dir)}; resume with "
                      f"`orchestra run --resume {job_dir}`", soft_wrap=True)
            raise typer.Exit(130) from None
        _render_and_gate(a, job, name, baseline_trials)


def _take_over_resumed(a: RunArgs) -> None:
    """--resume JOB_DIR: the job's own path, folder, condition, policy, layer, k and
    endpoints replace the flags' (a changed manifest is refused: two conditions in one job)."""
    from pydantic import ValidationError

    from orchestrator.errors import validation_problems
    from orchestrator.models.jobconfig import JobConfig
    from orchestrator.models.manifest import Manifest

    assert a.resume is not None
    config_file = a.resume / "config.json"
    if not config_file.is_file():
        raise InputError(f"{config_file}: not a job folder (no config.json)")
    try:
        config = JobConfig.model_validate_json(config_file.read_text())
        lineup = Manifest.model_validate(config.manifest)
    except ValidationError as exc:  # the manifest's fields are named under 'manifest.'
        prefix = "manifest." if exc.title == "Manifest" else ""
        raise InputError(validation_problems(config_file, exc, prefix)) from None
    source = config.source
    a.path = Path(source.path) if source.path else a.path
    a.jobs_dir, a.job_name = a.resume.parent, a.resume.name
    if config.condition_hash and lineup.condition_hash() != config.condition_hash:
        raise InputError(f"{config_file}: field 'manifest': it no longer gives the "
                         f"condition hash {config.condition_hash[:12]} this job ran "
                         "with; resume would mix two conditions. Start a new job.")
    a.policy, a.layer = config.policy, source.layer
    a.k = None if config.k is None else str(config.k)
    a.endpoints = _resumed_endpoints(a, [Path(p) for p in source.endpoints])
    a.resumed, a.lineup_from_resume = source, lineup


def _resumed_endpoints(a: RunArgs, recorded: list[Path]) -> list[Path] | None:
    """A job folder is input (DESIGN 4): the endpoint files its config.json names never win
    over the user's. --endpoints given: those. Otherwise the user's own config (the default
    endpoints/*.json), and the job's files are said; where they define an endpoint the user's
    config lacks or defines otherwise (another base URL, key variable, model), the resume is
    refused unless --trust-job-endpoints says to use them."""
    from orchestrator.models.endpoint import default_endpoint_files, load_endpoints

    if a.endpoints or not recorded:
        return a.endpoints
    try:
        theirs = load_endpoints(recorded).endpoints
    except InputError as exc:
        err.print(f"--resume: the endpoint files the job folder names are not readable ({exc}); "
                  "using your own endpoint config", markup=False, highlight=False, soft_wrap=True)
        return a.endpoints
    err.print("--resume: the job folder names endpoint files " + ", ".join(map(str, recorded)) + ": "
              + ", ".join(f"{n} -> {e.base_url or e.provider}" for n, e in sorted(theirs.items())),
              markup=False, highlight=False, soft_wrap=True)
    mine_files = [p.resolve() for p in default_endpoint_files()]
    mine = load_endpoints(mine_files).endpoints if mine_files else {}
    differ = sorted(n for n, e in theirs.items() if n not in mine or mine[n].model_dump() != e.model_dump())
    if not differ:
        return a.endpoints  # the same endpoints: the user's own files serve them
    if not a.trust_job_endpoints:
        raise InputError(f"--resume {a.resume}: the job folder's endpoint files define "
                         f"{', '.join(differ)} otherwise than your endpoint config "
                         f"({', '.join(map(str, mine_files)) or 'none'}) does (base URL, key "
                         "variable or model); pass --endpoints to choose yours, or "
                         "--trust-job-endpoints to use the job's")
    err.print(f"--resume: --trust-job-endpoints: using the job folder's endpoints for {', '.join(differ)}",
              markup=False, highlight=False, soft_wrap=True)
    return recorded


def _check(a: RunArgs) -> tuple[str, int | None]:
    """Every flag that can be checked before anything runs. Returns the job's name and
    the attempts (None: per layer, or -k auto against the baseline)."""
    from orchestrator.job.preflight import REQUIRABLE
    from orchestrator.models.manifest import AGENT_NAMES, is_agent_kind
    from orchestrator.util import check_job_name, registry_problem

    if a.path is None:
        raise InputError("--path: required (a task folder or a dataset)")
    attempts = None if a.k is None or a.k == "auto" else _positive_int("-k", a.k)
    if a.k == "auto" and a.baseline is None:
        raise InputError("-k auto: needs --baseline JOB_DIR (the attempts are chosen against it)")
    if not 0 < a.detect_drop <= 1:
        raise InputError(f"--detect-drop: {a.detect_drop} is not a drop in pass rate between 0 and 1")
    if a.fail_on_regression and a.baseline is None:
        raise InputError("--fail-on-regression: needs --baseline JOB_DIR")
    # to the second plus a random tail: two jobs started in one second never share a name
    name = a.job_name or dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S-") + os.urandom(2).hex()
    a.job_name = name
    if (problem := check_job_name(name)) is not None:
        raise InputError(f"--job-name: {problem}")
    if a.ca_bundle is not None and not a.ca_bundle.is_file():
        raise InputError(f"--ca-bundle: {a.ca_bundle}: no such file")
    if a.replay_from is not None and not any(a.replay_from.glob("trials/*/model/exchanges.jsonl")):
        raise InputError(f"--replay-from: {a.replay_from}: no recorded exchanges "
                         "(trial folders with model/exchanges.jsonl) there")
    if a.retry_errors and a.resume is None:
        raise InputError("--retry-errors: only with --resume JOB_DIR")
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
    if a.resume is None and (a.jobs_dir / name / "result.json").exists():
        raise InputError(f"{a.jobs_dir / name}: a finished job is already there; choose another "
                         "--job-name or --resume it (nothing was overwritten)")
    _writable(a.jobs_dir)
    return name, attempts


def _tasks(a: RunArgs) -> list[Task]:
    """The tasks under --path (with --skip-broken, without those the doctor found unfit),
    narrowed to --layer; the keys Harbor ignores are said."""
    from orchestrator.tasks.load import load_tasks

    assert a.path is not None
    if a.skip_broken:
        from orchestrator.job.doctor import invalid, skipped_by_run
        from orchestrator.tasks.load import load_tasks_lenient

        tasks, problems = load_tasks_lenient(a.path)
        plan = skipped_by_run(tasks, a.ca_bundle)
        if note := plan.note(a.path, a.ca_bundle):
            err.print(note, markup=False, highlight=False, soft_wrap=True)
        tasks, left = plan.keep, plan.left + invalid(problems)
    else:
        tasks = load_tasks(a.path)
    _note_ignored_fields(tasks)
    if a.skip_broken:
        if left:
            err.print(f"--skip-broken: {len(left)} task(s) the doctor found unable to measure an "
                      f"agent are left out: " + ", ".join(f"{d.task} ({d.verdict})" for d in left[:10])
                      + (f" and {len(left) - 10} more" if len(left) > 10 else ""), markup=False,
                      highlight=False, soft_wrap=True)
        if not tasks:
            raise InputError(f"{a.path}: --skip-broken left no task to run (`orchestra tasks doctor` says why)")
    if a.layer is not None:
        tasks = [t for t in tasks if t.config.metadata.evaluation_layer == a.layer]
        if not tasks:
            raise InputError(f"{a.path}: no task has [metadata] evaluation_layer = {a.layer!r}")
    return tasks


def _lineup(a: RunArgs) -> Manifest:
    """The manifest (the resumed job's, --manifest, or one agent's), with --agent / -m."""
    from orchestrator.models.manifest import default_manifest, is_agent_kind, load_manifest

    agent = a.agent if a.agent is not None and is_agent_kind(a.agent) else None  # _check held it
    if a.lineup_from_resume is not None:
        lineup = a.lineup_from_resume
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


def _allow_task_env(a: RunArgs, lineup: Manifest) -> Manifest:
    """--task-env joins the manifest's sandbox.task_env: the only host variables a task's
    `${VAR}` may read (DESIGN 4). orchestra's own secrets are refused by name (exit 2):
    ORCHESTRA_* and the key variable of every endpoint in the endpoint config."""
    import re

    from orchestrator.models.endpoint import default_endpoint_files, load_endpoints
    from orchestrator.tasks.compose import allow_host_env

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


def _job_options(a: RunArgs, name: str, attempts: int | None) -> JobOptions:
    from orchestrator.job.options import JobOptions
    from orchestrator.models.endpoint import default_endpoint_files, load_endpoints

    assert a.path is not None
    endpoint_files = [p.resolve() for p in (a.endpoints or default_endpoint_files())]
    if a.resume is not None:
        manifest_dir = Path(a.resumed.manifest_dir) if a.resumed.manifest_dir else None
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


def _gate_names(a: RunArgs) -> tuple[str, str]:
    """The two jobs as the gate's messages name them."""
    return f"job {a.jobs_dir / (a.job_name or '')}", f"job {a.baseline}"


def _read_baseline(a: RunArgs, options: JobOptions, tasks: list[Task]) -> list[TrialResult] | None:
    """--baseline, read now: a bad one is refused before any trial runs, and so is one the
    gate could compare nothing with (no task in common by name or content hash, none of
    --gate-layer's, none graded there) or whose tasks changed (without --allow-changed).
    It also gives -k auto its attempts and the scheduler its durations (longest first)."""
    if a.baseline is None:
        return None
    from orchestrator.job.durations import measured
    from orchestrator.report.gate import TaskKey, check_comparable, check_options
    from orchestrator.report.load import load_trials

    baseline_trials = load_trials(a.baseline)
    check_options(a.flaky, a.alpha)
    here = {t.name: TaskKey(frozenset({t.content_hash}), t.config.metadata.evaluation_layer) for t in tasks}
    check_comparable(here, baseline_trials, _gate_names(a), a.allow_changed, a.gate_layer)
    if a.k == "auto":
        options.k = _auto_k(baseline_trials, a.detect_drop, a.alpha, a.gate_layer)
    options.durations = measured(baseline_trials)
    return baseline_trials


def _run(a: RunArgs, tasks: list[Task], lineup: Manifest, options: JobOptions) -> JobResult:
    from orchestrator.job.runner import run_job
    from orchestrator.report.progress import Progress
    from orchestrator.runtime import open_runtime

    configure_logs(a.verbose, a.jobs_dir / options.job_name / "events.jsonl")
    runtime = open_runtime(max_pool_size=a.n_concurrent * 3 + 8)
    _terminate_as_interrupt()
    with Progress(err, live=False if a.quiet or a.verbose or a.progress_json else None,
                  json_lines=a.progress_json) as progress:
        return run_job(runtime, tasks, lineup, options, progress.observers())


def _render_and_gate(a: RunArgs, job: JobResult, name: str,
                     baseline_trials: list[TrialResult] | None) -> None:
    """The results table, --json, then the exits that judge the job: an answer leak (4),
    the regression gate against --baseline (1 with --fail-on-regression)."""
    from orchestrator.models.result import TrialResult
    from orchestrator.report.summary import render_job
    from orchestrator.util import write_output

    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((a.jobs_dir / name / "trials").glob("*/result.json"))]
    human = human_console(a.json_out)
    render_job(job, trials, human)
    human.print(f"job folder: {a.jobs_dir / name}", soft_wrap=True)
    if a.json_out:
        write_output(a.json_out, job)
    leaks = job.counts.get("answer_leak", 0)
    if leaks:
        err.print(f"[bold red]answer leak[/] in {leaks} trial(s): the agent read what grades it (a "
                  "task's tests or solution files, or its memory source files); the suite was "
                  "stopped and its results are void.")
        raise typer.Exit(4)
    if a.baseline is not None and baseline_trials is not None:
        from orchestrator.report.gate import gate

        try:
            regression = gate(trials, baseline_trials, a.allow_changed, a.gate_layer, a.flaky, a.alpha,
                              names=_gate_names(a))
        except InputError as exc:  # the job's results are written; only the gate refuses
            fail(exc)
        _report_gate(regression, a.baseline, a.jobs_dir / name, a.fail_on_regression, human)


def _positive_int(option: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"{option}: {value!r} is not a whole number of attempts (1 or more) or 'auto'")
    return int(value)


def _auto_k(baseline_trials: list[TrialResult], drop: float, alpha: float, gate_layer: str | None) -> int:
    """-k auto: attempts enough to tell a drop of `drop` from chance against the baseline,
    said with what they cannot tell: tasks the baseline ran too few times for any k (run
    with the baseline's own attempts), and tasks left to the one-attempt rule at k=1."""
    from orchestrator.report.gate import attempts_to_tell

    if gate_layer is not None:
        baseline_trials = [t for t in baseline_trials if t.layer == gate_layer]
    plan = attempts_to_tell(baseline_trials, drop, alpha)

    def say(text: str) -> None:
        err.print(text, markup=False, highlight=False, soft_wrap=True)

    told = [t for t in plan.tasks if t.k is not None]
    say(f"-k auto: k={plan.k} against the baseline's attempts (it ran each task up to "
        f"{plan.baseline_k} time(s)); {len(told)} of {len(plan.tasks)} task(s) it passed can tell a "
        f"drop of {drop:g} in pass rate from chance with 80% power at alpha {alpha:g}")
    if cannot := plan.cannot:
        shown = ", ".join(f"{t.task} ({t.baseline} in the baseline)" for t in cannot[:5])
        need = (f"rerun the baseline with -k {plan.baseline_k_needed} (and this job with as many) to tell it"
                if plan.baseline_k_needed else f"no k up to {plan.most} on both sides tells it")
        say(f"-k auto: no k up to {plan.most} can tell it for {len(cannot)} task(s) the baseline ran "
            f"too few times ({shown}{', ...' if len(cannot) > 5 else ''}): they run with the "
            f"baseline's own attempts and the gate cannot promise to catch that drop; {need}")
    if plan.one_attempt:
        say(f"-k auto: k=1 against {len(plan.one_attempt)} task(s) the baseline ran once: they are "
            "judged by the one-attempt rule (passed there, failed now), which cannot tell a "
            "regression from chance: a task that passes 90% of the time fails the gate 1 time in 10")
    return plan.k


def _cancel_counts(job_dir: Path) -> str:
    """How a cancelled job ended, from the result.json it wrote on the way out."""
    from orchestrator.models.result import JobResult

    try:
        job = JobResult.model_validate_json((job_dir / "result.json").read_text())
    except (OSError, ValueError):
        return "unfinished trials are marked cancelled"
    cancelled = job.counts.get("cancelled", 0)
    return (f"{job.n_trials - cancelled} of {job.n_trials} trial(s) finished, {cancelled} "
            "cancelled (marked so in the job folder)")


def _terminate_as_interrupt() -> None:
    """SIGTERM cancels like Ctrl-C; a second signal during clean-up is noted, not obeyed."""
    state = {"count": 0}

    def handler(signum: int, frame: FrameType | None) -> None:
        state["count"] += 1
        if state["count"] == 1:
            raise KeyboardInterrupt
        err.print("[yellow]still cleaning up; orchestra removes its containers before it exits[/]")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


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


def _note_ignored_fields(tasks: list[Task]) -> None:
    """Keys Harbor ignores are accepted, never silently: one stderr line per set of keys
    (and per schema warning), naming its tasks (each result.json records its own)."""
    lines: dict[str, list[str]] = {}
    for task in tasks:
        if task.ignored_fields:
            label = f"note: ignored (Harbor ignores them too): {', '.join(task.ignored_fields)}"
            lines.setdefault(label, []).append(task.name)
        if task.schema_warning:
            lines.setdefault(f"warning: {task.schema_warning}", []).append(task.name)
    for label, names in lines.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        err.print(f"{label}: {shown}", markup=False, highlight=False, soft_wrap=True)
