"""The command line. Thin: parse, call one function, render."""

# No `from __future__ import annotations` here: typer reads every command's annotations on
# each run, and evaluating them from strings cost 15 ms of each `orchestra` command (as
# objects made once at import: 4 ms). Names imported only for type checking are quoted.

import gc
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from orchestrator.cli.app import (
    app,
    console,
    err,
    fail,
    human_console,
    imports_done,
    one_paragraph,
    print_table,
)
from orchestrator.errors import InputError

if TYPE_CHECKING:

    from rich.console import Console

    from orchestrator.api import JobReport
    from orchestrator.report import Gate


# Enumerated options: --help lists the values; another is refused (exit 2) naming them.
Layer = Literal["regression", "workflow"]
Policy = Literal["memory-on", "memory-off"]
Order = Literal["longest-first", "given"]
Admission = Literal["reserve", "cpu-limit"]
Backend = Literal["local", "ray"]
BuildPolicy = Literal["prefer-prebuilt", "build", "pull"]
Bases = Literal["auto", "pull", "offline"]
Flaky = Literal["gate", "report", "ignore"]


@app.command()
def run(
    path: Annotated[Path | None, typer.Option("--path", "-p", help="Task folder or dataset to run.")] = None,
    manifest: Annotated[Path | None, typer.Option(help="Agent lineup (YAML).")] = None,
    agent: Annotated[str | None, typer.Option(help="Override the orchestrator's agent: a built-in one (oracle | nop | reference | command | acp | acp-opencode | acp-qwen-code) or an installed CLI (mini-swe-agent | aider | opencode | claude-code | codex | gemini-cli | qwen-code | openhands), installed on first use; `orchestra agents` lists them.")] = None,
    n_concurrent: Annotated[int, typer.Option("--n-concurrent", "-n", min=1, help="Trials at a time.")] = 4,
    k: Annotated[str | None, typer.Option("-k", help="Attempts per task (default: per layer, regression 1, workflow 3, else 1). 'auto' with --baseline: enough attempts to tell a drop of --detect-drop in a task's pass rate from chance (printed).")] = None,
    layer: Annotated[Layer | None, typer.Option(help="Only tasks whose task.toml says this metadata.evaluation_layer.")] = None,
    jobs_dir: Annotated[Path, typer.Option(help="Where job folders go.")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option(help="Job folder name (default: a timestamp).")] = None,
    resume: Annotated[Path | None, typer.Option(help="Resume this job folder: run only trials without a complete result (cancelled ones included).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="With --resume: also re-run trials that ended in infra_error, launch_error or build_error (after a fix).")] = False,
    policy: Annotated[Policy, typer.Option(help="Seeded memory on, or the ablation without it.")] = "memory-on",
    endpoints: Annotated[list[Path] | None, typer.Option(
        "--endpoints", "--endpoint-config", help="Endpoint config JSON (repeatable; default: every endpoints/*.json).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Run the reference agent (or --agent) on this endpoint (a name in the endpoint config) without writing a manifest.")] = None,
    replay_from: Annotated[Path | None, typer.Option("--replay-from", help="Answer every model call from this job folder's recorded exchanges (trial/model/exchanges.jsonl): a re-run with exactly the same model outputs.")] = None,
    max_retries: Annotated[int, typer.Option(min=0, help="Retries of infrastructure failures per trial (an engine outage's do not count).")] = 2,
    image_budget_gb: Annotated[float | None, typer.Option("--image-budget-gb", min=0, help="Keep orchestra's task images on the engine within this many GB on disk (a base many of them share counts once) while the job runs: after trials finish, the least recently used are pruned, never one a running or queued trial of this job needs, nor one another job used in the last hour. Without it the disk is still watched: the job warns below 10% free on the engine's data root and stops (exit 3, results kept) below 2%.")] = None,
    order: Annotated[Order, typer.Option("--order", help="longest-first: trials whose durations are known (the --baseline job's, else what orchestra recorded on this host for the same task content and agent) start longest first, unknown ones before them, so one long trial does not run alone at the end ; given: tasks in folder order.")] = "longest-first",
    engine_wait: Annotated[float, typer.Option("--engine-wait", min=0, help="Seconds trials wait for an engine that stopped answering (restarting, or answering errors) before the job stops as infrastructure (exit 3; --resume goes on). The outages are in the job result's engine_outages.")] = 300.0,
    max_cpus: Annotated[float | None, typer.Option(help="Admission budget in cpus (default: the engine's).")] = None,
    max_memory_mb: Annotated[int | None, typer.Option(help="Admission budget in MB (default: the engine's).")] = None,
    admission: Annotated[Admission | None, typer.Option("--admission", help="Declared cpus: cpu-limit (the container's limit only, as Harbor and Docker mean it: trials share the cores, up to -n at once) | reserve (held for the whole trial: a trial starts only when its cpus fit --max-cpus beside the running ones; steady per-trial times, for timing-sensitive or gated runs). Memory is reserved under both. Default: the manifest's sandbox.admission, else cpu-limit. Recorded in the job result.")] = None,
    build_ahead: Annotated[int | None, typer.Option("--build-ahead", min=0, help="Build task images ahead of trials, N at once, longest first, in a pool beside the running trials (a trial's slot and reservation start once its images exist; a build failure is its task's, said once). Default: min(2, the engine's cpus); more where builds mostly download. 0: each trial builds its own images as it starts. Local backend only (on Ray and under --image-budget-gb each trial builds its own).")] = None,
    backend: Annotated[Backend, typer.Option(help="Where trials run: here, or on Ray (each trial a Ray task).")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: auto, i.e. RAY_ADDRESS or a local cluster).")] = None,
    oci_runtime: Annotated[str | None, typer.Option("--oci-runtime", help="OCI runtime for every container of a trial (agent, verifier, workers, sidecars), e.g. runsc (gVisor); refused before any trial when the engine lacks it. A manifest's sandbox.oci_runtime sets it for a suite.")] = None,
    # the flag's old name, kept working for scripts; hidden ("runtime" is the engine seam's word)
    old_runtime: Annotated[str | None, typer.Option("--runtime", hidden=True)] = None,
    build_policy: Annotated[BuildPolicy, typer.Option("--build-policy", help="A task's docker_image: prefer-prebuilt (use it, else pull, else build environment/Dockerfile) | build (always the Dockerfile) | pull (pull fresh, no fallback).")] = "prefer-prebuilt",
    bases: Annotated[Bases | None, typer.Option("--bases", help="FROM images the engine lacks (task Dockerfile, tests/Dockerfile, compose): auto (pulled as Docker would, with the engine's mirrors and your registry credentials; a stand-in only when no registry answers, said once per image) | pull (a failed pull is the task's build_error) | offline (never pulled: orchestra's Debian stand-ins). Default: the manifest's sandbox.bases, else auto.")] = None,
    require: Annotated[list[str] | None, typer.Option("--require", help="A capability the engine must enforce, else exit 2 before any trial (repeatable): disk-quota (a per-trial disk that fills at the task's storage_mb; needs root and an engine on this host) | host-isolation (a trial reaches only its own ports on this host; needs root and iptables). Without it, what is missing is said once and recorded in the result's `capabilities`.")] = None,
    registry: Annotated[str | None, typer.Option("--registry", envvar="ORCHESTRA_REGISTRY", help="HOST[:PORT]/PREFIX: push each task image the job builds there (credentials from the Docker config); Ray nodes pull them instead of building. Checked before any trial starts.")] = None,
    ca_bundle: Annotated[Path | None, typer.Option("--ca-bundle", envvar="ORCHESTRA_CA_BUNDLE", help="A CA bundle (PEM) that task image builds trust: pip, curl, node, git behind a TLS-intercepting proxy.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Also write the job result here ('-': stdout).")] = None,
    baseline: Annotated[Path | None, typer.Option(help="After the run, gate against this baseline job folder (as `orchestra report --baseline`).")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 1 when a task regressed (see `orchestra report --help` for the rule).")] = False,
    gate_layer: Annotated[str | None, typer.Option("--gate-layer", help="With --baseline: gate only tasks of this evaluation layer (default: every task).")] = None,
    flaky: Annotated[Flaky, typer.Option("--flaky", help="With --baseline: tasks flaky in the baseline (some passes, some fails): gate (they gate too), report (listed, not gated) or ignore (left out).")] = "report",
    alpha: Annotated[float, typer.Option("--alpha", help="With --baseline: the gate's false discovery rate (the expected share of false alarms among the regressions it names).")] = 0.05,
    detect_drop: Annotated[float, typer.Option("--detect-drop", help="With -k auto: the drop in pass rate (0-1) the attempts must be able to tell, with 80% power.")] = 0.5,
    allow_changed: Annotated[bool, typer.Option("--allow-changed", help="With --baseline: compare tasks whose content changed between the jobs.")] = False,
    skip_broken: Annotated[bool, typer.Option("--skip-broken", help="Leave out tasks that do not load and those `orchestra tasks doctor` found broken, leaky or without a solution (its cached verdicts), and say how many.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Plain progress lines, no live display.")] = False,
    progress_json: Annotated[bool, typer.Option("--progress-json", help="Progress as one JSON object per finished trial on stderr (done, total, task, reward, failure_mode, rate_per_min, eta_seconds, failures so far by mode), for a pipeline to read.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log events to stderr.")] = False,
    task_env: Annotated[list[str] | None, typer.Option("--task-env", help="A host variable the tasks may read (repeatable): `${NAME}` in a task's docker-compose.yaml or verifier.env. Nothing by default: any other reads as its default, else empty (said in each result's host_env_notes). Never orchestra's own (ORCHESTRA_*, an endpoint's key). Joins the manifest's sandbox.task_env.")] = None,
    registry_auth: Annotated[list[str] | None, typer.Option("--registry-auth", metavar="HOST", help="A registry (HOST[:PORT], docker.io for Docker Hub) whose credentials in your Docker config builds and pulls may send (repeatable; also ORCHESTRA_REGISTRY_AUTH, comma-separated). None by default: a dataset names its own FROM images, and any registry not named here is sent no credentials (a public image pulls as before, a private one is refused). --registry's host is named already.")] = None,
    trust_job_endpoints: Annotated[bool, typer.Option("--trust-job-endpoints", help="With --resume: use endpoint files the job folder names even where they differ from the ones you give (or the default endpoints/*.json); without it such a resume is refused.")] = False,
) -> None:
    """Run every task under PATH k times with the manifest's agents; grade each trial.

    With `--json -` only the JSON goes to stdout; tables and notes go to stderr.

    {exits}
    """
    flags = dict(locals())  # the parsed flags, before anything else is named here
    from orchestrator.cli.run import execute, parse

    flags["oci_runtime"] = _oci_runtime_flag(oci_runtime, flags.pop("old_runtime"))
    execute(*parse(flags))  # orchestrator.api runs it; cli/run.py shows it


def _oci_runtime_flag(oci_runtime: str | None, old_runtime: str | None) -> str | None:
    """--oci-runtime, or its old name --runtime: one value (both, differing, is exit 2)."""
    if oci_runtime and old_runtime and oci_runtime != old_runtime:
        raise typer.BadParameter(f"{oci_runtime!r}, but --runtime (its old name) says {old_runtime!r}",
                                 param_hint="--oci-runtime")
    return oci_runtime or old_runtime


run.__doc__ = (run.__doc__ or "").replace("{exits}", one_paragraph("""Exit codes: 0 the job
    completed (whatever the rewards); 1 the gate asked for failed (--fail-on-regression); 2
    bad input (nothing started; a --baseline with nothing to compare included); 3 the engine
    or host failed (Docker unreachable, the job folder's disk full); 4 an answer leak was
    found (the suite stopped, results void); 70 orchestra itself failed (a bug; the traceback
    in a file it names); 130 cancelled (Ctrl-C / SIGTERM; results kept)."""))


GATE_HELP = one_paragraph("""With --baseline JOB_DIR, a regression gate for release pipelines:
    every task both jobs ran (or --gate-layer's), matched by name, else by content hash (a
    dataset checked out under another name), is compared by its pass rate over graded
    attempts; nothing to compare is exit 2, never a pass. For any k on either side a task
    regresses when the rate dropped by more than chance explains (Fisher's exact test,
    one-sided, a false discovery rate of --alpha, Benjamini-Hochberg over the tasks that
    could regress); only with one attempt on both sides, when it passed there and fails now
    (and the verdict says one attempt cannot tell). Tasks flaky in the baseline are reported
    and gate only with --flaky gate. Every compared task's verdict, and how it was matched,
    goes to regressions.json and the JUnit file.""")
REPORT_EXITS = one_paragraph("""Exit codes: 0 reported (and every gate asked for held); 1 a
    gate asked for failed (--fail-under, --fail-on-regression); 2 bad input (a missing or
    unreadable job folder, a bad option, a baseline with nothing to compare); 70 orchestra
    itself failed (a bug; the traceback in a file it names).""")


@app.command()
def report(
    job_dir: Annotated[Path, typer.Argument(help="A job folder.")],
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here.")] = None,
    atif: Annotated[Path | None, typer.Option("--atif", help="Write every trial's trajectory in ATIF (Harbor's Agent Trajectory Interchange Format) into this folder, one TRIAL.json each (TRIAL.STEP.json for a multi-step task's steps): the agent/trajectory.atif.json collection wrote, or, for a trial without one (a job from an older orchestra), built now from its folder.")] = None,
    json_out: Annotated[str | None, typer.Option("--json", help="Write the report (job result, tables, gate) as JSON here ('-': stdout, the rest to stderr).")] = None,
    fail_under: Annotated[float | None, typer.Option(help="Exit 1 when the mean reward is below this.")] = None,
    baseline: Annotated[Path | None, typer.Option(help="A baseline job: the regression gate (below).")] = None,
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="With --baseline: exit 1 when a task regressed.")] = False,
    gate_layer: Annotated[str | None, typer.Option("--gate-layer", help="With --baseline: gate only tasks of this evaluation layer (default: every task).")] = None,
    flaky: Annotated[Flaky, typer.Option("--flaky", help="With --baseline: tasks flaky in the baseline (some passes, some fails): gate (they gate too), report (listed, not gated) or ignore (left out).")] = "report",
    alpha: Annotated[float, typer.Option("--alpha", help="With --baseline: the gate's false discovery rate (the expected share of false alarms among the regressions it names).")] = 0.05,
    allow_changed: Annotated[bool, typer.Option("--allow-changed", help="With --baseline: compare tasks whose content changed between the jobs.")] = False,
) -> None:
    """Summarise a job: tables per task, layer, class and failure mode, pass@k, tokens and
    cost, phase timings; writes report.md and a self-contained report.html into the job.

    {gate}

    {exits}
    """
    from orchestrator.api import open_report

    imports_done()

    human = human_console(json_out)
    try:
        opened = open_report(job_dir, baseline=baseline, fail_on_regression=fail_on_regression,
                             gate_layer=gate_layer, flaky=flaky, alpha=alpha, allow_changed=allow_changed)
    except InputError as exc:
        fail(exc)
        return
    job, trials, regression = opened.job, opened.trials, opened.gate
    try:
        blocks = _write_report(opened, human)
    except InputError as exc:  # a link where report.md or report.html goes
        fail(exc)
        return
    if junit:
        from orchestrator.report import write_junit

        write_junit(job.job, job_dir, trials, junit, regression)
        human.print(f"wrote {junit}", soft_wrap=True)
    if atif:
        _write_atif(job_dir, atif, human)
    if json_out:
        from orchestrator.util import write_output

        write_output(json_out, {"job": job.model_dump(mode="json"),
                                "tables": [{"title": t, "header": h, "rows": r} for t, h, r in blocks],
                                "gate": regression.as_dict() if regression else None})
    failing = fail_under is not None and job.mean_reward < fail_under
    if failing:
        err.print(f"mean reward {job.mean_reward:.3f} is below --fail-under {fail_under}")
    if regression is not None and baseline is not None:  # the API wrote regressions.json
        _report_gate(regression, baseline, fail_on_regression, human)
    if failing:
        raise typer.Exit(1)


report.__doc__ = (report.__doc__ or "").replace("{gate}", GATE_HELP).replace("{exits}", REPORT_EXITS)


def _write_report(opened: "JobReport", human: "Console") -> list[tuple[str, list[str], list[list[str]]]]:
    """The tables on the console, report.md and report.html into the job; the tables' blocks."""
    from orchestrator.report import sections, to_html
    from orchestrator.report.render import to_markdown
    from orchestrator.report.tables import tables

    job, job_dir = opened.job, opened.job_dir
    aggregate = tables(opened.trials)
    for problem in opened.left_out:
        err.print(f"left out of the report: {problem}", markup=False)
    human.print(f"[bold]job {job.job}[/]: {job.n_trials} trials, mean reward {job.mean_reward:.3f}, "
                f"{aggregate.tokens_text}, {aggregate.cost_text}")
    blocks = sections(job, aggregate)
    for title, header, rows in blocks:
        print_table(human, title, header, rows)
    from orchestrator.util import write_atomic  # a link there is refused, never followed

    write_atomic(job_dir / "report.md", to_markdown(job, aggregate, opened.compare))
    write_atomic(job_dir / "report.html", to_html(job, aggregate, opened.compare, opened.trials))
    human.print(f"wrote {job_dir / 'report.md'} and {job_dir / 'report.html'}", soft_wrap=True)
    return blocks


def _write_atif(job_dir: Path, out: Path, human: "Console") -> None:
    """The job's ATIF files into `out`; what had to be built, and trials left out, said."""
    from orchestrator.api import export_atif

    export = export_atif(job_dir, out)
    for line in export.built + export.problems:
        human.print(line, markup=False, highlight=False, soft_wrap=True)
    human.print(f"wrote {export.written} ATIF trajectories to {out} ({len(export.copied)} as collected, "
                f"{len(export.built)} built now)", soft_wrap=True)


def _report_gate(regression: "Gate", baseline: Path, fail_on_regression: bool, human: "Console") -> None:
    """Print the gate's verdict (its caller wrote regressions.json); exit 1 when asked to fail
    and a task regressed."""
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
    from orchestrator.api import compare_jobs
    from orchestrator.report.compare import to_markdown
    from orchestrator.util import write_output

    imports_done()

    try:
        report = compare_jobs(first, second)
    except InputError as exc:
        fail(exc)
        return
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
    from orchestrator.api import serve_view

    imports_done()
    roots = jobs or [Path("jobs")]
    # Ctrl-C and SIGTERM stop it, set here: a process started in the background of a script
    # inherits SIGINT ignored, and Python then leaves it so (`orchestra view &` could not be
    # stopped by the signal `kill -INT` sends; a test suite run in the background never could)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server = serve_view(roots, port)
    except InputError as exc:
        fail(exc)
        return
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

CRASHED = 70  # EX_SOFTWARE: orchestra itself failed (a bug), never a verdict on the agent


def _crashed(exc: Exception) -> int:
    """An exception nothing caught is a bug in orchestra: one short message on stderr, the
    traceback in a file it names (on stderr when no file can be written), exit 70, never 1
    (a gate that failed) nor Python's traceback exit 1 that a pipeline would read as one."""
    import tempfile
    import traceback

    trace = "".join(traceback.format_exception(exc))
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    try:
        with tempfile.NamedTemporaryFile("w", prefix="orchestra-crash-", suffix=".txt",
                                         delete=False) as file:
            file.write(f"orchestra {' '.join(sys.argv[1:])}\n\n{trace}")
        where = f"the traceback is in {file.name}"
    except OSError:
        sys.stderr.write(trace)
        where = "the traceback is above"
    err.print(f"orchestra failed (a bug in orchestra, not a verdict on the agent or your input): "
              f"{what}; {where}; exit {CRASHED}", markup=False, highlight=False, soft_wrap=True)
    return CRASHED


def main() -> None:
    # orchestra's models need no pydantic plugin; looking for them reads every installed
    # package's metadata at the first model (tens of ms of each run's start-up)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    gc.disable()  # until a command has loaded what it needs (imports_done)
    if not err.is_terminal:  # typer's usage errors: click's plain lines, not a box cut at 80
        app.rich_markup_mode = None
    try:
        app()
    except KeyboardInterrupt:
        err.print("cancelled")
        sys.exit(130)
    except Exception as exc:
        from orchestrator.errors import RuntimeFault

        if isinstance(exc, RuntimeFault):
            err.print(f"[red]the Docker engine failed[/]: {exc}")
            sys.exit(3)
        sys.exit(_crashed(exc))
    finally:
        gc.freeze()  # the interpreter's exit then skips collecting what is left


if __name__ == "__main__":
    main()
