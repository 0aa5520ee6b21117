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
from orchestrator.errors import InfraError, InputError


@tasks_app.command("check")
def tasks_check(path: Annotated[Path, typer.Argument(help="A task folder or a dataset folder.")],
                json_out: Annotated[bool, typer.Option("--json", help="Print JSON (a list of tasks) instead of lines.")] = False) -> None:
    """Validate a task or every task under a folder; list every problem found, then the
    task.toml keys orchestra (like Harbor) ignores, and what each task needs that this host
    lacks (images, a registry, cpus, the network).
    Exit codes: 0 every task valid, 2 a problem (each named by file and field)."""
    from orchestrator.job.host_needs import host_needs
    from orchestrator.tasks import load_tasks

    imports_done()
    human = err if json_out else console
    try:
        tasks = load_tasks(path)
    except InputError as exc:
        fail(exc)
    runtime = info = None
    try:
        from orchestrator.runtime import open_runtime

        runtime = open_runtime()
        info = runtime.engine_facts()
    except InfraError:
        human.print("note: no Docker engine answers; images and capacity are not checked")
    rows = []
    for task in tasks:
        needs = host_needs(task, runtime, info)
        rows.append({"task": task.name, "path": str(task.path), "content_hash": task.content_hash,
                     "ignored_fields": task.ignored_fields, "schema_warning": task.schema_warning,
                     "needs": needs})
        if not json_out:
            console.print(f"ok  {task.name}  ({task.path})  hash {task.content_hash}", soft_wrap=True)
            if task.schema_warning:
                console.print(f"    warning: {task.schema_warning}", markup=False, soft_wrap=True)
            if task.ignored_fields:
                console.print(f"    ignored (Harbor ignores them too): {', '.join(task.ignored_fields)}",
                              markup=False, soft_wrap=True)
            for need in needs:
                console.print(f"    needs: {need}", markup=False, soft_wrap=True)
    if info is not None and "runsc" not in info.oci_runtimes:
        human.print("note: gVisor is not available on this engine (`--oci-runtime runsc` would be refused). "
                    "To add it: apt-get install runsc, put these lines in /etc/docker/daemon.json "
                    '(merged with what is there): {"runtimes": {"runsc": {"path": "/usr/bin/runsc", '
                    '"runtimeArgs": ["--platform=ptrace", "--network=host"]}}}, then `kill -HUP $(pidof dockerd)`',
                    markup=False, soft_wrap=True)
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
    else:
        console.print(f"{len(tasks)} task(s) valid")


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

    from orchestrator.job import diagnose, invalid
    from orchestrator.models import Observers, TrialFinished
    from orchestrator.runtime import open_runtime
    from orchestrator.tasks import load_tasks_lenient

    imports_done()
    human = err if json_out else console
    try:
        if ca_bundle is not None and not ca_bundle.is_file():
            raise InputError(f"--ca-bundle: {ca_bundle}: no such file")
        tasks, problems = load_tasks_lenient(path)
        configure_logs(verbose, None)
        runtime = open_runtime(max_pool_size=n_concurrent * 3 + 8)

        def progress(event: TrialFinished) -> None:
            result = event.result
            err.print(f"  [{event.done}/{event.total}] {result.agent} {result.task}: {result.failure_mode.value}",
                      markup=False, highlight=False, soft_wrap=True)

        found = diagnose(runtime, tasks, jobs_dir, n_concurrent=n_concurrent, ca_bundle=ca_bundle,
                         refresh=refresh, observers=Observers().on(TrialFinished, progress)) if tasks else []
        found += invalid(problems)
    except (InputError, InfraError) as exc:
        fail(exc)

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
    from orchestrator.runtime import BuildFailed, open_runtime
    from orchestrator.tasks import RELEASES
    from orchestrator.trial import BOOTSTRAP_RELEASES, bootstrap_base

    configure_logs(verbose=True)
    releases = list(release or BOOTSTRAP_RELEASES)
    for name in releases:
        if name not in RELEASES:
            fail(InputError(f"--release: {name!r} is not one of {', '.join(RELEASES)}"))
    try:
        runtime = open_runtime()
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(releases)) as pool:  # debootstrap waits on the mirror
            images = list(pool.map(lambda r: bootstrap_base(runtime, r, force=force), releases))
    except InfraError as exc:
        fail(exc)
    except BuildFailed as exc:
        err.print(f"[red]bootstrap failed:[/] {exc}")
        raise typer.Exit(3) from exc
    for name, image in zip(releases, images, strict=True):
        console.print(f"{image} ready (Debian {name}, python {RELEASES[name]})")


@app.command()
def agents(json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
           install: Annotated[list[str] | None, typer.Option("--install", help="Install this agent now (repeatable; `all` for every one).")] = None,
           ca_bundle: Annotated[Path | None, typer.Option("--ca-bundle", envvar="ORCHESTRA_CA_BUNDLE", help="A CA bundle (PEM) pip and npm trust.")] = None) -> None:
    """The agents `orchestra run --agent NAME` takes: built-in ones and installed CLIs
    (kind, version, whether the host has installed it yet; an installed CLI is
    installed on first use, or now with --install)."""
    from orchestrator.agents import INSTALLED, AgentRow, ensure_installed, listing
    from orchestrator.models import AGENT_NAMES

    imports_done()

    try:
        for name in (list(INSTALLED) if install == ["all"] else install or []):
            if name not in INSTALLED:
                raise InputError(f"--install: {name!r} is not one of {', '.join(INSTALLED)}")
            for recipe in INSTALLED[name].recipes():  # the CLI and what it runs on (Node)
                ensure_installed(recipe, ca_bundle)
    except (InputError, InfraError) as exc:
        fail(exc)
    import orchestrator

    built_in: list[AgentRow] = [{"name": n, "kind": "built-in", "version": orchestrator.__version__,
                                 "installed": True, "path": ""} for n in AGENT_NAMES if n not in INSTALLED]
    rows = built_in + listing()
    if json_out:
        typer.echo(json.dumps(rows, indent=2))
        return
    print_table(console, "agents", ["agent", "kind", "version", "model API", "the image needs", "installed"],
                [[row["name"], row["kind"], row["version"], row.get("api", ""), row.get("needs", ""),
                  "yes" if row["installed"] else "on first use"] for row in rows])


@app.command()
def cleanup(
    job: Annotated[str | None, typer.Option("--job", help="Remove this job's objects (even if its orchestrator still runs).")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Remove every object orchestra created on this engine, live jobs included.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also prune orchestra's task images.")] = False,
    keep_gb: Annotated[float | None, typer.Option(help="With --images: keep the most recently used up to this size.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: the objects in scope (--dry-run) or the counts removed.")] = False,
) -> None:
    """Remove containers, networks and volumes orchestra created (and the loop disks behind
    them). By default only those of jobs whose orchestrator process on this host is gone,
    and the idle networks kept between jobs; `--job NAME` one job's, `--all` all of them.
    Objects orchestra did not create (e.g. someone's container from an image orchestra
    built) are never touched."""
    from orchestrator.host import LABEL_JOB, plan, prune_images, reap, reap_orphans, remove_idle
    from orchestrator.runtime import LABEL_KIND, open_runtime

    configure_logs()
    if job is not None and everything:
        fail(InputError("--job and --all: choose one"))
    try:
        runtime = open_runtime()
    except InfraError as exc:
        fail(exc)
    scope = "every orchestra object" if everything else (
        f"job {job}" if job else "jobs whose orchestrator is gone")
    if dry_run:
        rows = plan(runtime, job, everything)
        if job is None and not everything:
            rows += [{"kind": "network", "name": n, "labels": {LABEL_JOB: "(idle, kept between jobs)"}}
                     for n in remove_idle(runtime, dry_run=True)]
        if json_out:
            typer.echo(json.dumps([{"kind": r["kind"], "name": r["name"], "job": r["labels"].get(LABEL_JOB)}
                                   for r in rows], indent=2))
            return
        for row in rows:
            console.print(f"would remove {row['kind']} {row['name'][:64]}  "
                          f"(job {row['labels'].get(LABEL_JOB, '?')})", markup=False)
        console.print(f"{len(rows)} object(s) in scope ({scope}); nothing removed (--dry-run)",
                      soft_wrap=True)
        return
    if everything:
        removed = reap(runtime, LABEL_KIND)
    elif job is not None:
        removed = reap(runtime, f"{LABEL_JOB}={job}")
    else:
        removed = reap_orphans(runtime)
        removed["networks"] += len(remove_idle(runtime))
    if images:
        removed["images"] = len(prune_images(runtime, keep_gb))
    if json_out:
        typer.echo(json.dumps({"scope": scope, "removed": removed}, indent=2))
        return
    console.print(", ".join(f"{n} {what}" for what, n in removed.items()) + f" removed ({scope})")
