"""Commands that look after the host rather than run trials: `tasks check`, `images
bootstrap`, `agents`, `cleanup` (registered on the CLI's app by orchestrator.cli.commands)."""

# No `from __future__ import annotations` here: typer reads every command's annotations on
# each run, and evaluating them from strings cost 15 ms of each `orchestra` command (as
# objects made once at import: 4 ms). Names imported only for type checking are quoted.

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app import (
    app,
    configure_logs,
    console,
    err,
    fail,
    images_app,
    imports_done,
    print_table,
    tasks_app,
)
from orchestrator.errors import BuildFailed, InfraError, InputError


@tasks_app.command("check")
def tasks_check(path: Annotated[Path, typer.Argument(help="A task folder or a dataset folder.")],
                json_out: Annotated[bool, typer.Option("--json", help="Print JSON (a list of tasks) instead of lines.")] = False) -> None:
    """Validate a task or every task under a folder; list every problem found, then the
    task.toml keys orchestra (like Harbor) ignores, and what each task needs that this host
    lacks (images, a registry, cpus, the network).
    Exit codes: 0 every task valid, 2 a problem (each named by file and field)."""
    from orchestrator.api import check_tasks

    imports_done()
    human = err if json_out else console
    try:
        checked = check_tasks(path)
    except InputError as exc:
        fail(exc)
        return
    if not checked.engine_answered:
        human.print("note: no Docker engine answers; images and capacity are not checked")
    for task in [] if json_out else checked.tasks:  # --json: the list alone, at the end
        console.print(f"ok  {task.task}  ({task.path})  hash {task.content_hash}", soft_wrap=True)
        if task.schema_warning:
            console.print(f"    warning: {task.schema_warning}", markup=False, soft_wrap=True)
        if task.ignored_fields:
            console.print(f"    ignored (Harbor ignores them too): {', '.join(task.ignored_fields)}",
                          markup=False, soft_wrap=True)
        for need in task.needs:
            console.print(f"    needs: {need}", markup=False, soft_wrap=True)
    if checked.engine_answered and "runsc" not in checked.oci_runtimes:
        human.print("note: gVisor is not available on this engine (`--oci-runtime runsc` would be refused). "
                    "To add it: apt-get install runsc, put these lines in /etc/docker/daemon.json "
                    '(merged with what is there): {"runtimes": {"runsc": {"path": "/usr/bin/runsc", '
                    '"runtimeArgs": ["--platform=ptrace", "--network=host"]}}}, then `kill -HUP $(pidof dockerd)`',
                    markup=False, soft_wrap=True)
    if json_out:
        typer.echo(json.dumps([t.model_dump(mode="json") for t in checked.tasks], indent=2))
    else:
        console.print(f"{len(checked.tasks)} task(s) valid")


@tasks_app.command("doctor")
def tasks_doctor(
    path: Annotated[Path, typer.Argument(help="A task folder or a dataset folder.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON (one object per task) instead of a table.")] = False,
    jobs_dir: Annotated[Path, typer.Option(help="Where the oracle and nop jobs are written.")] = Path("jobs"),
    n_concurrent: Annotated[int, typer.Option("--n-concurrent", "-n", help="Trials at a time.")] = 2,
    ca_bundle: Annotated[Path | None, typer.Option("--ca-bundle", envvar="ORCHESTRA_CA_BUNDLE", help="A CA bundle (PEM) every build and container trusts (a TLS-intercepting proxy).")] = None,
    refresh: Annotated[bool, typer.Option(help="Ignore cached verdicts and run every task again.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log events to stderr.")] = False,
) -> None:
    """Run the oracle and nop once on every task and say whether it can measure an agent:
    healthy (oracle 1, nop 0), broken (oracle below 1, with the reason: build failed, an
    image stood in, a test needing a network this host lacks, a timeout...), weak-test (nop
    scores), no-solution, leaky (the built image holds the task's tests or solution, or a
    .git with commits past its HEAD), not-scanned (oracle 1, nop 0, but the leak scan
    could not look, e.g. no python3 in the image: the reason is said), invalid (it does not
    load: its problems). Verdicts are cached by task content and --ca-bundle: a rerun of an
    unchanged dataset runs nothing. `orchestra run --skip-broken` (same --ca-bundle) leaves
    out broken, leaky and no-solution tasks; not-scanned ones run. Exit codes: 0 every task
    healthy; 1 some task is not; 2 bad input; 3 the engine failed."""
    from collections import Counter

    from orchestrator.api import doctor_tasks
    from orchestrator.models import Observers, TrialFinished

    imports_done()
    human = err if json_out else console

    def progress(event: TrialFinished) -> None:
        result = event.result
        err.print(f"  [{event.done}/{event.total}] {result.agent} {result.task}: {result.failure_mode.value}",
                  markup=False, highlight=False, soft_wrap=True)

    try:
        configure_logs(verbose, None)
        found = doctor_tasks(path, jobs_dir=jobs_dir, n_concurrent=n_concurrent, ca_bundle=ca_bundle,
                             refresh=refresh, observers=Observers().on(TrialFinished, progress))
    except (InputError, InfraError) as exc:
        fail(exc)
        return

    def score(value: float | None) -> str:
        return "-" if value is None else f"{value:g}"

    if json_out:
        typer.echo(json.dumps([d.model_dump(mode="json") for d in found], indent=2))
    else:
        print_table(console, "orchestra tasks doctor", ["task", "verdict", "oracle", "nop", "reason"],
                    [[d.task, d.verdict, score(d.oracle), score(d.nop), d.reason] for d in found])
    counts = Counter(d.verdict for d in found)
    human.print(", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())), markup=False)
    if any(d.verdict != "healthy" for d in found):
        raise typer.Exit(1)


@images_app.command("bootstrap")
def images_bootstrap(force: Annotated[bool, typer.Option(help="Rebuild even if present.")] = False,
                     release: Annotated[list[str] | None, typer.Option("--release", help="A Debian release to build (repeatable): bookworm, trixie, bullseye. Default: bookworm and trixie.")] = None) -> None:
    """Build the offline bases from Debian packages (no registry needed): Debian with
    python3, pip, venv and ca-certificates, made to behave like the official python images.
    A FROM this engine lacks is built on the nearest one (python 3.13+ trixie, 3.11-3.12
    bookworm, older bullseye; debian and ubuntu by release), said in the run's output."""
    from orchestrator.api import bootstrap_bases

    configure_logs(verbose=True)
    try:
        ready = bootstrap_bases(release, force=force)
    except (InputError, InfraError) as exc:
        fail(exc)
        return
    except BuildFailed as exc:
        err.print(f"[red]bootstrap failed:[/] {exc}")
        raise typer.Exit(3) from exc
    for base in ready:
        console.print(f"{base.image} ready (Debian {base.release}, python {base.python})")


@app.command()
def agents(json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
           install: Annotated[list[str] | None, typer.Option("--install", help="Install this agent now (repeatable; `all` for every one).")] = None,
           ca_bundle: Annotated[Path | None, typer.Option("--ca-bundle", envvar="ORCHESTRA_CA_BUNDLE", help="A CA bundle (PEM) pip and npm trust.")] = None) -> None:
    """The agents `orchestra run --agent NAME` takes: built-in ones and installed CLIs
    (kind, version, whether the host has installed it yet, and then the bytes its folder
    takes on disk, measured; an installed CLI is installed on first use, or now with
    --install)."""
    from orchestrator.api import install_agents, list_agents

    imports_done()
    try:
        install_agents(install or [], ca_bundle)
    except (InputError, InfraError) as exc:
        fail(exc)
    rows = list_agents()
    if json_out:
        typer.echo(json.dumps([row.model_dump() for row in rows], indent=2))
        return
    print_table(console, "agents", ["agent", "kind", "version", "model API", "the image needs", "installed",
                                    "size on disk"],
                [[row.name, row.kind, row.version, row.api, row.needs,
                  "yes" if row.installed else "on first use", _size(row.size_bytes)] for row in rows])


def _size(size_bytes: int | None) -> str:
    """Bytes as `orchestra agents` shows them: 1.9 GB, 412.3 MB; "-" when not measured."""
    if size_bytes is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


@app.command()
def cleanup(
    job: Annotated[str | None, typer.Option("--job", help="Remove this job's objects (even if its orchestrator still runs).")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Remove every object orchestra created on this engine, live jobs included.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also prune orchestra's task images.")] = False,
    keep_gb: Annotated[float | None, typer.Option(help="With --images: keep the most recently used up to this many GB on disk (a base many images share counts once).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: the objects in scope (--dry-run) or the counts removed.")] = False,
) -> None:
    """Remove containers, networks and volumes orchestra created (and the loop disks behind
    them). By default only those of jobs whose orchestrator process on this host is gone,
    and the idle networks kept between jobs; `--job NAME` one job's, `--all` all of them.
    Objects orchestra did not create (e.g. someone's container from an image orchestra
    built) are never touched."""
    from orchestrator.api import clean_up, cleanup_plan

    configure_logs()
    try:
        if dry_run:
            shown = cleanup_plan(job, everything, images, keep_gb)
        else:
            done = clean_up(job, everything, images, keep_gb)
    except (InputError, InfraError) as exc:
        fail(exc)
        return
    if dry_run:
        if json_out:
            typer.echo(json.dumps([o.model_dump(mode="json") for o in shown.objects], indent=2))
            return
        for row in shown.objects:
            owner = "" if row.kind == "image" else f"  (job {row.job or '?'})"
            console.print(f"would remove {row.kind} {row.name[:64]}{owner}", markup=False)
        console.print(f"{len(shown.objects)} object(s) in scope ({shown.scope}); nothing removed (--dry-run)",
                      soft_wrap=True)
        return
    removed = done.removed.model_dump(exclude_none=True)
    if json_out:
        typer.echo(json.dumps({"scope": done.scope, "removed": removed}, indent=2))
        return
    console.print(", ".join(f"{n} {what}" for what, n in removed.items()) + f" removed ({done.scope})")
