"""The command line. Thin: parse, call one function, render."""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app import (
    app,
    configure_logs,
    console,
    err,
    fail,
    human_console,
    imports_done,
    one_paragraph,
    print_table,
)
from orchestrator.errors import InfraError, InputError

if TYPE_CHECKING:
    from types import FrameType

    from rich.console import Console

    from orchestrator.models.result import TrialResult
    from orchestrator.report.gate import Gate
    from orchestrator.tasks.load import Task


@app.command()
def run(
    path: Annotated[Path | None, typer.Option("--path", "-p", help="Task folder or dataset to run.")] = None,
    manifest: Annotated[Path | None, typer.Option(help="Agent lineup (YAML).")] = None,
    agent: Annotated[str | None, typer.Option(help="Override the orchestrator's agent: oracle | nop | reference | command, or an installed CLI (mini-swe-agent | aider | opencode; see `orchestra agents`).")] = None,
    n_concurrent: Annotated[int, typer.Option("--n-concurrent", "-n", min=1, help="Trials at a time.")] = 4,
    k: Annotated[str | None, typer.Option("-k", help="Attempts per task (default: per layer, regression 1, workflow 3, else 1). 'auto' with --baseline: enough attempts to tell a drop of --detect-drop in a task's pass rate from chance (printed).")] = None,
    layer: Annotated[str | None, typer.Option(help="Only tasks of this [metadata] evaluation_layer: regression | workflow.")] = None,
    jobs_dir: Annotated[Path, typer.Option(help="Where job folders go.")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option(help="Job folder name (default: a timestamp).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Resume this job folder: run only trials without a complete result (cancelled ones included).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="With --resume: also re-run trials that ended in infra_error, launch_error or build_error (after a fix).")] = False,
    policy: Annotated[str, typer.Option(help="memory-on | memory-off")] = "memory-on",
    endpoints: Annotated[list[Path] | None, typer.Option(
        "--endpoints", "--endpoint-config", help="Endpoint config JSON (repeatable; default: every endpoints/*.json).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Run the reference agent (or --agent) on this endpoint (a name in the endpoint config) without writing a manifest.")] = None,
    replay_from: Annotated[Path | None, typer.Option("--replay-from", help="Answer every model call from this job folder's recorded exchanges (trial/model/exchanges.jsonl): a re-run with exactly the same model outputs.")] = None,
    max_retries: Annotated[int, typer.Option(min=0, help="Retries of infrastructure failures per trial (an engine outage's do not count).")] = 2,
    image_budget_gb: Annotated[float | None, typer.Option("--image-budget-gb", min=0, help="Keep orchestra's task images on the engine within this many GB while the job runs: after trials finish, the least recently used are pruned, never one a running or queued trial of this job needs, nor one another job used in the last hour. Without it the disk is still watched: the job warns below 10% free on the engine's data root and stops (exit 3, results kept) below 2%.")] = None,
    order: Annotated[str, typer.Option("--order", help="longest-first: trials whose durations are known (the --baseline job's, else what orchestra recorded on this host for the same task content and agent) start longest first, unknown ones before them, so one long trial does not run alone at the end | given: tasks in folder order.")] = "longest-first",
    engine_wait: Annotated[float, typer.Option("--engine-wait", min=0, help="Seconds trials wait for an engine that stopped answering (restarting, or answering errors) before the job stops as infrastructure (exit 3; --resume goes on). The outages are in the job result's engine_outages.")] = 300.0,
    max_cpus: Annotated[float | None, typer.Option(help="Admission budget in cpus (default: the engine's).")] = None,
    max_memory_mb: Annotated[int | None, typer.Option(help="Admission budget in MB (default: the engine's).")] = None,
    backend: Annotated[str, typer.Option(help="Where trials run: local | ray (each trial a Ray task).")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: auto, i.e. RAY_ADDRESS or a local cluster).")] = None,
    oci_runtime: Annotated[str | None, typer.Option("--runtime", help="OCI runtime for every container of a trial (agent, verifier, workers, sidecars), e.g. runsc (gVisor); refused before any trial when the engine lacks it. A manifest's sandbox.oci_runtime sets it for a suite.")] = None,
    build_policy: Annotated[str, typer.Option("--build-policy", help="A task's docker_image: prefer-prebuilt (use it, else pull, else build environment/Dockerfile) | build (always the Dockerfile) | pull (pull fresh, no fallback).")] = "prefer-prebuilt",
    require: Annotated[list[str] | None, typer.Option("--require", help="A capability the engine must enforce, else exit 2 before any trial (repeatable): disk-quota (a per-trial disk that fills at the task's storage_mb; needs root and an engine on this host) | host-isolation (a trial reaches only its own ports on this host; needs root and iptables). Without it, what is missing is said once and recorded in the result's `capabilities`.")] = None,
    registry: Annotated[str | None, typer.Option("--registry", envvar="ORCHESTRA_REGISTRY", help="HOST[:PORT]/PREFIX: push each task image the job builds there (credentials from the Docker config); Ray nodes pull them instead of building. Checked before any trial starts.")] = None,
    ca_bundle: Annotated[Path | None, typer.Option("--ca-bundle", envvar="ORCHESTRA_CA_BUNDLE", help="A CA bundle (PEM) that task image builds trust: pip, curl, node, git behind a TLS-intercepting proxy.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the job result here ('-': stdout).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="After the run, gate against this baseline job folder (as `orchestra report --baseline`).")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 1 when a task regressed (see `orchestra report --help` for the rule).")] = False,
    gate_layer: Annotated[str | None, typer.Option("--gate-layer", help="With --baseline: gate only tasks of this evaluation layer (default: every task).")] = None,
    flaky: Annotated[str, typer.Option("--flaky", help="With --baseline: tasks flaky in the baseline (some passes, some fails): gate | report | ignore.")] = "report",
    alpha: Annotated[float, typer.Option("--alpha", help="With --baseline: the gate's false discovery rate (the expected share of false alarms among the regressions it names).")] = 0.05,
    detect_drop: Annotated[float, typer.Option("--detect-drop", help="With -k auto: the drop in pass rate (0-1) the attempts must be able to tell, with 80% power.")] = 0.5,
    allow_changed: Annotated[bool, typer.Option("--allow-changed", help="With --baseline: compare tasks whose content changed between the jobs.")] = False,
    skip_broken: Annotated[bool, typer.Option("--skip-broken", help="Leave out tasks that do not load and those `orchestra tasks doctor` found broken, leaky or without a solution (its cached verdicts), and say how many.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Plain progress lines, no live display.")] = False,
    progress_json: Annotated[bool, typer.Option("--progress-json", help="Progress as one JSON object per finished trial on stderr (done, total, task, reward, failure_mode, rate_per_min, eta_seconds, failures so far by mode), for a pipeline to read.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log events to stderr.")] = False,
) -> None:
    """Run every task under PATH k times with the manifest's agents; grade each trial.

    With `--json -` only the JSON goes to stdout; tables and notes go to stderr.

    {exits}
    """
    from orchestrator.job.runner import JobOptions, run_job
    from orchestrator.models.endpoint import default_endpoint_files, load_endpoints
    from orchestrator.models.manifest import (
        AGENT_NAMES,
        Manifest,
        default_manifest,
        is_agent_kind,
        load_manifest,
    )
    from orchestrator.report.progress import Progress
    from orchestrator.report.summary import render_job
    from orchestrator.runtime import open_runtime
    from orchestrator.tasks.load import load_tasks
    from orchestrator.util import check_job_name, registry_problem, write_output

    resumed_manifest_dir = None
    try:
        if resume is not None:
            config_file = resume / "config.json"
            if not config_file.is_file():
                raise InputError(f"{config_file}: not a job folder (no config.json)")
            config = json.loads(config_file.read_text())
            source = config.get("source") or {}
            path = Path(source["path"]) if source.get("path") else path
            jobs_dir, job_name = resume.parent, resume.name
            lineup = Manifest.model_validate(config["manifest"])
            if config.get("condition_hash") and lineup.condition_hash() != config["condition_hash"]:
                raise InputError(f"{config_file}: field 'manifest': it no longer gives the "
                                 f"condition hash {config['condition_hash'][:12]} this job ran "
                                 "with; resume would mix two conditions. Start a new job.")
            policy, layer = config.get("policy", policy), source.get("layer")
            k = None if config.get("k") is None else str(config["k"])
            endpoints = [Path(p) for p in source.get("endpoints", [])] or endpoints
            resumed_manifest_dir = source.get("manifest_dir")
        if path is None:
            raise InputError("--path: required (a task folder or a dataset)")
        k_auto = k == "auto"
        attempts = None if k is None or k_auto else _positive_int("-k", k)
        if k_auto and baseline is None:
            raise InputError("-k auto: needs --baseline JOB_DIR (the attempts are chosen against it)")
        if not 0 < detect_drop <= 1:
            raise InputError(f"--detect-drop: {detect_drop} is not a drop in pass rate between 0 and 1")
        if fail_on_regression and baseline is None:
            raise InputError("--fail-on-regression: needs --baseline JOB_DIR")
        # to the second plus a random tail: two jobs started in one second never share a name
        name = job_name or dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S-") + os.urandom(2).hex()
        if (problem := check_job_name(name)) is not None:
            raise InputError(f"--job-name: {problem}")
        if ca_bundle is not None and not ca_bundle.is_file():
            raise InputError(f"--ca-bundle: {ca_bundle}: no such file")
        if replay_from is not None and not any(replay_from.glob("**/model/exchanges.jsonl")):
            raise InputError(f"--replay-from: {replay_from}: no recorded exchanges "
                             "(trial folders with model/exchanges.jsonl) there")
        if retry_errors and resume is None:
            raise InputError("--retry-errors: only with --resume JOB_DIR")
        if order not in ("longest-first", "given"):
            raise InputError(f"--order: {order!r} is not longest-first or given")
        if build_policy not in ("prefer-prebuilt", "build", "pull"):
            raise InputError(f"--build-policy: {build_policy!r} is not prefer-prebuilt, build or pull")
        if registry is not None and (problem := registry_problem(registry)) is not None:
            raise InputError(f"--registry: {problem}")
        from orchestrator.job.runner import REQUIRABLE

        if unknown := [r for r in require or [] if r not in REQUIRABLE]:
            raise InputError(f"--require {unknown[0]}: not a capability (choose from: {', '.join(REQUIRABLE)})")
        if policy not in ("memory-on", "memory-off"):
            raise InputError(f"--policy: {policy!r} is not memory-on or memory-off")
        if agent is not None and not is_agent_kind(agent):
            raise InputError(f"--agent: {agent!r} is not one of {', '.join(AGENT_NAMES)} "
                             "(`orchestra agents` lists them)")
        if backend not in ("local", "ray"):
            raise InputError(f"--backend: {backend!r} is not local or ray")
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                raise InputError("--backend ray: Ray is not installed (pip install 'orchestra[ray]')") from None
        if layer is not None and layer not in ("regression", "workflow"):
            raise InputError(f"--layer: {layer!r} is not regression or workflow")
        if resume is None and (jobs_dir / name / "result.json").exists():
            raise InputError(f"{jobs_dir / name}: a finished job is already there; choose another "
                             "--job-name or --resume it (nothing was overwritten)")
        _writable(jobs_dir)
        if skip_broken:
            from orchestrator.job.doctor import invalid, skipped_by_run
            from orchestrator.tasks.load import load_tasks_lenient

            tasks, problems = load_tasks_lenient(path)
            tasks, left = skipped_by_run(tasks)
            left += invalid(problems)
        else:
            tasks = load_tasks(path)
        _note_ignored_fields(tasks)
        if skip_broken:
            if left:
                err.print(f"--skip-broken: {len(left)} task(s) the doctor found unable to measure an "
                          f"agent are left out: " + ", ".join(f"{d.task} ({d.verdict})" for d in left[:10])
                          + (f" and {len(left) - 10} more" if len(left) > 10 else ""), markup=False,
                          highlight=False, soft_wrap=True)
            if not tasks:
                raise InputError(f"{path}: --skip-broken left no task to run (`orchestra tasks doctor` says why)")
        if layer is not None:
            tasks = [t for t in tasks if t.config.metadata.evaluation_layer == layer]
            if not tasks:
                raise InputError(f"{path}: no task has [metadata] evaluation_layer = {layer!r}")
        if resume is None:
            lineup = load_manifest(manifest) if manifest else default_manifest(
                agent or ("reference" if model else "oracle"))
        if agent:
            lineup = lineup.with_agent(agent)
        if model:
            lineup = lineup.with_endpoint(model)
        lead = lineup.orchestrator
        if lead.agent == "command" and not lead.command:
            raise InputError("--agent command: the command agent needs a run template; write a "
                             "manifest with `command:` (and `install:`) for the orchestrator")
        endpoint_files = [p.resolve() for p in (endpoints or default_endpoint_files())]
        if resume is not None:
            manifest_dir = Path(resumed_manifest_dir) if resumed_manifest_dir else None
        else:
            manifest_dir = manifest.parent.resolve() if manifest else None
        options = JobOptions(
            job_name=name, jobs_dir=jobs_dir, n_concurrent=n_concurrent, k=attempts, policy=policy,
            manifest_dir=manifest_dir, max_retries=max_retries, engine_wait=engine_wait, longest_first=order == "longest-first", image_budget_gb=image_budget_gb, max_cpus=max_cpus,
            max_memory_mb=max_memory_mb, resume=resume is not None, oci_runtime=oci_runtime,
            retry_errors=retry_errors, ca_bundle=ca_bundle, build_policy=build_policy, registry=registry,
            require=list(require or []),
            backend=backend, ray_address=ray_address, replay_from=replay_from,
            endpoints=load_endpoints(endpoint_files) if endpoint_files else None,
            source={"path": str(path.resolve()), "layer": layer,
                    "endpoints": [str(p) for p in endpoint_files],
                    "manifest_dir": str(manifest_dir) if manifest_dir else None})
        if baseline is not None:  # read now: a bad baseline is refused before any trial runs
            from orchestrator.report.load import load_trials

            baseline_trials = load_trials(baseline)
            from orchestrator.report.gate import check_options

            check_options(flaky, alpha)
            if k_auto:
                options.k = _auto_k(baseline_trials, detect_drop, alpha, gate_layer)
            from orchestrator.job.durations import measured

            options.durations = measured(baseline_trials)
        configure_logs(verbose, jobs_dir / name / "events.jsonl")
        runtime = open_runtime(max_pool_size=n_concurrent * 3 + 8)
        _terminate_as_interrupt()
        with Progress(err, live=False if quiet or verbose or progress_json else None,
                      json_lines=progress_json) as progress:
            job = run_job(runtime, tasks, lineup, options, on_trial_done=progress.trial_done,
                          on_phase=progress.phase, on_plan=progress.plan,
                          on_admission=progress.admission)
    except (InputError, InfraError) as exc:
        fail(exc)
    except KeyboardInterrupt:
        err.print(f"[yellow]cancelled[/]: {_cancel_counts(jobs_dir / name)}; resume with "
                  f"`orchestra run --resume {jobs_dir / name}`", soft_wrap=True)
        raise typer.Exit(130) from None
    from orchestrator.models.result import TrialResult

    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((jobs_dir / name / "trials").glob("*/result.json"))]
    human = human_console(json_out)
    render_job(job, trials, human)
    human.print(f"job folder: {jobs_dir / name}", soft_wrap=True)
    if json_out:
        write_output(json_out, job)
    leaks = job.counts.get("answer_leak", 0)
    if leaks:
        err.print(f"[bold red]answer leak[/] in {leaks} trial(s): the agent read a task's memory "
                  "source files; the suite was stopped and its results are void.")
        raise typer.Exit(4)
    if baseline is not None:
        from orchestrator.report.gate import gate

        try:
            regression = gate(trials, baseline_trials, allow_changed, gate_layer, flaky, alpha)
        except InputError as exc:  # the job's results are written; only the gate refuses
            fail(exc)
        _report_gate(regression, baseline, jobs_dir / name, fail_on_regression, human)


def _positive_int(option: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"{option}: {value!r} is not a whole number of attempts (1 or more) or 'auto'")
    return int(value)


def _auto_k(baseline_trials: list[TrialResult], drop: float, alpha: float, gate_layer: str | None) -> int:
    """-k auto: attempts enough to tell a drop of `drop` from chance against the baseline."""
    from orchestrator.report.gate import attempts_to_tell

    if gate_layer is not None:
        baseline_trials = [t for t in baseline_trials if t.layer == gate_layer]
    k, cannot = attempts_to_tell(baseline_trials, drop, alpha)
    if cannot:
        k = max(k, max((sum(1 for t in baseline_trials if t.task == name.split(" ")[0])
                        for name in cannot), default=1))
    err.print(f"-k auto: k={k}, the fewest attempts that tell a drop of {drop:g} in a task's pass "
              f"rate from chance (80% power, alpha {alpha:g}) against the baseline's attempts", soft_wrap=True)
    if cannot:
        err.print(f"-k auto: no k up to 20 can tell it for {len(cannot)} task(s) with so few baseline "
                  f"attempts ({', '.join(cannot[:5])}{', ...' if len(cannot) > 5 else ''}); rerun the "
                  "baseline with more attempts (-k)", soft_wrap=True)
    return k


run.__doc__ = (run.__doc__ or "").replace("{exits}", one_paragraph("""Exit codes: 0 the job
    completed (whatever the rewards); 1 the gate asked for failed (--fail-on-regression); 2
    bad input (nothing started); 3 the engine or host failed (Docker unreachable, the job
    folder's disk full); 4 an answer leak was found (the suite stopped, results void); 130
    cancelled (Ctrl-C / SIGTERM; results kept)."""))


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


GATE_HELP = one_paragraph("""With --baseline JOB_DIR, a regression gate for release pipelines:
    every task both jobs ran (or --gate-layer's) is compared by its pass rate over graded
    attempts. With k attempts a side, a task regresses when the rate dropped by more than
    chance explains (Fisher's exact test, one-sided, a false discovery rate of --alpha,
    Benjamini-Hochberg over the tasks that could regress); with k=1 on a side, when it passed there
    and fails now (and the verdict says one attempt cannot tell). Tasks flaky in the baseline
    are reported and gate only with --flaky gate. The verdicts go to regressions.json and
    the JUnit file.""")
REPORT_EXITS = one_paragraph("""Exit codes: 0 reported (and every gate asked for held); 1 a
    gate asked for failed (--fail-under, --fail-on-regression); 2 bad input (a missing or
    unreadable job folder, a bad option).""")


@app.command()
def report(
    job_dir: Annotated[Path, typer.Argument(help="A job folder.")],
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the report (job result, tables, gate) as JSON here ('-': stdout, the rest to stderr).")] = None,
    fail_under: Annotated[float | None, typer.Option(help="Exit 1 when the mean reward is below this.")] = None,
    baseline: Annotated[Path | None, typer.Option(help="A baseline job: the regression gate (below).")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 1 when a task regressed.")] = False,
    gate_layer: Annotated[str | None, typer.Option("--gate-layer", help="With --baseline: gate only tasks of this evaluation layer (default: every task).")] = None,
    flaky: Annotated[str, typer.Option("--flaky", help="With --baseline: tasks flaky in the baseline (some passes, some fails): gate | report | ignore.")] = "report",
    alpha: Annotated[float, typer.Option("--alpha", help="With --baseline: the gate's false discovery rate (the expected share of false alarms among the regressions it names).")] = 0.05,
    allow_changed: Annotated[bool, typer.Option("--allow-changed", help="With --baseline: compare tasks whose content changed between the jobs.")] = False,
) -> None:
    """Summarise a job: tables per task, layer, class and failure mode, pass@k, tokens and
    cost, phase timings; writes report.md and a self-contained report.html into the job.

    {gate}

    {exits}
    """
    from orchestrator.report.load import load_job_result, load_trials
    from orchestrator.report.render import sections, to_html, to_markdown
    from orchestrator.report.tables import tables

    imports_done()

    regression = None
    human = human_console(json_out)
    try:
        job = load_job_result(job_dir)
        trials = load_trials(job_dir)
        if fail_on_regression and baseline is None:
            raise InputError("--fail-on-regression: needs --baseline JOB_DIR")
        if baseline is not None:
            from orchestrator.report.gate import gate

            regression = gate(trials, load_trials(baseline), allow_changed, gate_layer, flaky, alpha)
    except InputError as exc:
        fail(exc)
    aggregate = tables(trials)
    compare = next((json.loads(p.read_text()) for p in sorted(job_dir.glob("compare*.json"))), None)
    human.print(f"[bold]job {job.job}[/]: {job.n_trials} trials, mean reward {job.mean_reward:.3f}, "
                f"tokens {aggregate.tokens}, cost {aggregate.cost:.4f}")
    blocks = sections(job, aggregate)
    for title, header, rows in blocks:
        print_table(human, title, header, rows)
    (job_dir / "report.md").write_text(to_markdown(job, aggregate, compare))
    (job_dir / "report.html").write_text(to_html(job, aggregate, compare, trials))
    human.print(f"wrote {job_dir / 'report.md'} and {job_dir / 'report.html'}", soft_wrap=True)
    if junit:
        from orchestrator.report.junit import write_junit

        write_junit(job.job, job_dir, trials, junit, regression)
        human.print(f"wrote {junit}", soft_wrap=True)
    if json_out:
        from orchestrator.util import write_output

        write_output(json_out, {"job": job.model_dump(mode="json"),
                                "tables": [{"title": t, "header": h, "rows": r} for t, h, r in blocks],
                                "gate": regression.as_dict() if regression else None})
    failing = fail_under is not None and job.mean_reward < fail_under
    if failing:
        err.print(f"mean reward {job.mean_reward:.3f} is below --fail-under {fail_under}")
    if regression is not None and baseline is not None:  # a gate is made against a baseline
        _report_gate(regression, baseline, job_dir, fail_on_regression, human)
    if failing:
        raise typer.Exit(1)


report.__doc__ = (report.__doc__ or "").replace("{gate}", GATE_HELP).replace("{exits}", REPORT_EXITS)


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


def _report_gate(regression: Gate, baseline: Path, job_dir: Path, fail_on_regression: bool,
                 human: Console) -> None:
    """Print and write (regressions.json) the gate's verdict; exit 1 when asked to fail and a
    task regressed."""
    from orchestrator.util import write_json_atomic

    write_json_atomic(job_dir / "regressions.json", regression.as_dict())
    for line in regression.lines():
        human.print(line, markup=False, highlight=False, soft_wrap=True)
    if not regression.failed:
        human.print(f"no regressions against {baseline}", soft_wrap=True)
    if fail_on_regression and regression.failed:
        names = [v.task for v in regression.verdicts if v.gates]
        err.print(f"regression gate failed: {len(names)} task(s): {', '.join(names)}", soft_wrap=True)
        raise typer.Exit(1)


@app.command("compare")
def compare_cmd(
    first: Annotated[Path, typer.Argument(help="A job result.json (or job folder).")],
    second: Annotated[Path, typer.Argument(help="The other arm's result.json (or folder).")],
    json_out: Annotated[str | None, typer.Option("--json", help="Write the comparison JSON ('-': stdout).")] = None,
    markdown: Annotated[str | None, typer.Option("--markdown", help="Write it as Markdown ('-': stdout).")] = None,
) -> None:
    """Paired memory-on vs memory-off comparison of two jobs (either order): utility delta,
    helpful and harmful trials, per-class table, McNemar p-value and a bootstrap CI."""
    from orchestrator.report.compare import compare, to_markdown
    from orchestrator.report.load import load_job_result
    from orchestrator.util import write_output

    imports_done()

    try:
        report = compare(load_job_result(first), load_job_result(second))
    except InputError as exc:
        fail(exc)
    text = to_markdown(report)
    human_console(json_out, markdown).print(text, markup=False, highlight=False)
    if json_out:
        write_output(json_out, report)
    if markdown:
        write_output(markdown, text)


@app.command()
def view(
    jobs: Annotated[list[Path] | None, typer.Argument(help="Job folders, or folders of jobs (default: jobs/).")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0: a free one).")] = 0,
) -> None:
    """Browse jobs in a local web app: jobs, each trial's failure reason first, its
    trajectory, relay evidence, output and verifier output. Serves 127.0.0.1 only and
    opens nothing by itself; Ctrl-C stops it."""
    from orchestrator.view.server import ViewServer

    imports_done()
    roots = jobs or [Path("jobs")]
    missing = [str(p) for p in roots if not p.exists()]
    if missing:
        fail(InputError([f"{p}: no such folder" for p in missing]))
    server = ViewServer(roots, port=port).start()
    console.print(f"orchestra view: {server.url}  (Ctrl-C to stop)", soft_wrap=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


# `tasks check`, `images bootstrap`, `agents`, `cleanup`: registered after the commands above,
# so --help lists run, report, compare and view first.
from orchestrator.cli import admin as cli_admin  # noqa: E402, F401


def main() -> None:
    # orchestra's models need no pydantic plugin; looking for them reads every installed
    # package's metadata at the first model (tens of ms of each run's start-up)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    gc.disable()  # until a command has loaded what it needs (imports_done)
    try:
        app()
    except KeyboardInterrupt:
        err.print("cancelled")
        sys.exit(130)
    except Exception as exc:
        from orchestrator.runtime.base import RuntimeFault

        if not isinstance(exc, RuntimeFault):
            raise
        err.print(f"[red]the Docker engine failed[/]: {exc}")
        sys.exit(3)
    finally:
        gc.freeze()  # the interpreter's exit then skips collecting what is left


if __name__ == "__main__":
    main()
