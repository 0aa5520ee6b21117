"""The command line. Thin: parse, call one function, render."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator import log as logsetup
from orchestrator.errors import InfraError, InputError, OrchestraError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="orchestra: run AI agents on tasks in containers and grade them.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect and validate tasks.")
images_app = typer.Typer(no_args_is_help=True, help="Manage task and base images.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(images_app, name="images")
console = Console()
err = Console(stderr=True)


def _fail(exc: OrchestraError) -> None:
    from orchestrator.report.summary import render_problems

    title = "bad input" if isinstance(exc, InputError) else "cannot run"
    render_problems(title, getattr(exc, "problems", None) or [str(exc)], err)
    raise typer.Exit(exc.exit_code)


@tasks_app.command("check")
def tasks_check(path: Annotated[Path, typer.Argument(help="A task folder or a dataset folder.")]):
    """Validate a task or every task under a folder; list every problem found."""
    from orchestrator.tasks import load_tasks

    try:
        tasks = load_tasks(path)
    except InputError as exc:
        _fail(exc)
    for task in tasks:
        console.print(f"ok  {task.name}  ({task.path})  hash {task.content_hash}")
    console.print(f"{len(tasks)} task(s) valid")


@app.command()
def run(
    path: Annotated[Path, typer.Option("--path", "-p", help="Task folder or dataset to run.")],
    manifest: Annotated[Path | None, typer.Option(help="Agent lineup (YAML).")] = None,
    agent: Annotated[str | None, typer.Option(help="Override the orchestrator's agent: oracle | nop | reference | command.")] = None,
    n_concurrent: Annotated[int, typer.Option("--n-concurrent", "-n", min=1, help="Trials at a time.")] = 4,
    k: Annotated[int, typer.Option("-k", min=1, help="Attempts per task.")] = 1,
    jobs_dir: Annotated[Path, typer.Option(help="Where job folders go.")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option(help="Job folder name (default: a timestamp).")] = None,
    policy: Annotated[str, typer.Option(help="memory-on | memory-off")] = "memory-on",
    endpoints: Annotated[list[Path] | None, typer.Option(
        "--endpoints", help="Endpoint config JSON (repeatable; default: every endpoints/*.json).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the job result here.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log events to stderr.")] = False,
):
    """Run every task under PATH k times with the manifest's agents; grade each trial.

    Exit codes: 0 the job completed (whatever the rewards), 2 bad input (nothing
    started), 3 Docker unreachable or another failure before any trial ran, 4 an answer
    leak was found (the suite stopped; see the trial's error).
    """
    from orchestrator.job import JobOptions, run_job
    from orchestrator.models.endpoint import default_endpoint_files, load_endpoints
    from orchestrator.models.manifest import default_manifest, load_manifest
    from orchestrator.report.summary import render_job
    from orchestrator.runtime.docker import DockerRuntime
    from orchestrator.tasks import load_tasks
    from orchestrator.util import write_json_atomic

    name = job_name or dt.datetime.now().strftime("%Y-%m-%d__%H-%M-%S")
    try:
        if policy not in ("memory-on", "memory-off"):
            raise InputError(f"--policy: {policy!r} is not memory-on or memory-off")
        if agent is not None and agent not in ("oracle", "nop", "reference", "command"):
            raise InputError(f"--agent: {agent!r} is not one of oracle, nop, reference, command")
        if (jobs_dir / name / "result.json").exists():
            raise InputError(f"{jobs_dir / name}: a finished job is already there; "
                             "choose another --job-name (nothing was overwritten)")
        tasks = load_tasks(path)
        lineup = load_manifest(manifest) if manifest else default_manifest(agent or "oracle")
        if agent:
            lineup = lineup.with_agent(agent)
        logsetup.configure(verbose, jobs_dir / name / "events.jsonl")
        runtime = DockerRuntime(max_pool_size=n_concurrent * 3 + 8)
        endpoint_files = endpoints or default_endpoint_files()
        options = JobOptions(job_name=name, jobs_dir=jobs_dir, n_concurrent=n_concurrent,
                             k=k, policy=policy, manifest_dir=manifest.parent if manifest else None,
                             endpoints=load_endpoints(endpoint_files) if endpoint_files else None)

        def progress(result, done, total):
            reward = "-" if result.reward is None else f"{result.headline:g}"
            err.print(f"[{done}/{total}] {result.task}#{result.attempt}: reward {reward} "
                      f"({result.failure_mode.value})", highlight=False)

        job = run_job(runtime, tasks, lineup, options, on_trial_done=progress)
    except (InputError, InfraError) as exc:
        _fail(exc)
    from orchestrator.models.result import TrialResult

    trials = [TrialResult.model_validate_json(p.read_text())
              for p in sorted((jobs_dir / name / "trials").glob("*/result.json"))]
    render_job(job, trials, console)
    console.print(f"job folder: {jobs_dir / name}")
    if json_out:
        write_json_atomic(json_out, job)
    leaks = job.counts.get("answer_leak", 0)
    if leaks:
        err.print(f"[bold red]answer leak[/] in {leaks} trial(s): the agent read a task's memory "
                  "source files; the suite was stopped and its results are void.")
        raise typer.Exit(4)


@app.command("compare")
def compare_cmd(
    first: Annotated[Path, typer.Argument(help="A job result.json (or job folder).")],
    second: Annotated[Path, typer.Argument(help="The other arm's result.json (or folder).")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the comparison JSON.")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="Write it as Markdown.")] = None,
):
    """Paired memory-on vs memory-off comparison of two jobs (either order): utility delta,
    helpful and harmful trials, per-class table, McNemar p-value and a bootstrap CI."""
    from orchestrator.report.compare import compare, to_markdown
    from orchestrator.report.load import load_job_result
    from orchestrator.util import write_json_atomic

    try:
        report = compare(load_job_result(first), load_job_result(second))
    except InputError as exc:
        _fail(exc)
    text = to_markdown(report)
    console.print(text, markup=False, highlight=False)
    if json_out:
        write_json_atomic(json_out, report)
    if markdown:
        markdown.write_text(text)


@images_app.command("bootstrap")
def images_bootstrap(force: Annotated[bool, typer.Option(help="Rebuild even if present.")] = False):
    """Build a Debian bookworm + python3 base from Debian packages (no registry needed)
    and register it for `FROM python:3.12-slim-bookworm` and friends."""
    from orchestrator.images import BASE_IMAGE, DEFAULT_ALIASES, bootstrap_base
    from orchestrator.runtime.docker import BuildFailed, DockerRuntime

    logsetup.configure(verbose=True)
    try:
        bootstrap_base(DockerRuntime(), force=force)
    except InfraError as exc:
        _fail(exc)
    except BuildFailed as exc:
        err.print(f"[red]bootstrap failed:[/] {exc}")
        raise typer.Exit(3) from exc
    console.print(f"{BASE_IMAGE} ready; stands in for: {', '.join(DEFAULT_ALIASES)}")


@app.command()
def cleanup(images: Annotated[bool, typer.Option("--images", help="Also remove orchestra's images.")] = False):
    """Remove every container, network and volume (and with --images, image) that carries
    orchestra's labels, and the loop disks behind them."""
    from orchestrator.job import reap
    from orchestrator.runtime.base import LABEL_KIND
    from orchestrator.runtime.docker import DockerRuntime

    logsetup.configure()
    try:
        runtime = DockerRuntime()
    except InfraError as exc:
        _fail(exc)
    removed = reap(runtime, LABEL_KIND)
    if images:
        refs = [i["Id"] for i in runtime.api.images(filters={"label": LABEL_KIND})
                if (i.get("Labels") or {}).get(LABEL_KIND) != "base"]
        for ref in refs:
            runtime.remove_image(ref)
        removed["images"] = len(refs)
    console.print(", ".join(f"{n} {what}" for what, n in removed.items()) + " removed")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("cancelled")
        sys.exit(130)


if __name__ == "__main__":
    main()
