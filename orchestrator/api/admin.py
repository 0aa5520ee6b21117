"""The API of the commands that look after tasks and the host rather than run a job:
`orchestra tasks check` (check_tasks), `tasks doctor` (doctor_tasks), `images bootstrap`
(bootstrap_bases), `agents` (install_agents, list_agents) and `cleanup` (cleanup_plan,
clean_up). Each returns a typed answer the CLI renders; each raises the one exception
tree's errors (InputError: bad input, named; InfraError: the engine or the host; BuildFailed
for a base that does not build), never prints.

    from orchestrator.api import check_tasks

    for task in check_tasks(Path("tasks/examples")).tasks:
        print(task.task, task.needs)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from orchestrator.agents import AgentRow
from orchestrator.errors import InfraError, InputError

if TYPE_CHECKING:
    from orchestrator.job import Diagnosis
    from orchestrator.models import Observers
    from orchestrator.runtime import Runtime


# ---- tasks check ---------------------------------------------------------------------------
class CheckedTask(BaseModel):
    """One valid task as `tasks check --json` prints it."""

    model_config = ConfigDict(frozen=True)

    task: str
    path: str
    content_hash: str
    ignored_fields: list[str]  # task.toml keys orchestra (like Harbor) ignores
    schema_warning: str | None
    needs: list[str]  # what the task needs that this host lacks (images, a registry, cpus...)


@dataclass(frozen=True)
class TasksCheck:
    """Every task under a folder, checked (a folder with any invalid task is an InputError)."""

    tasks: list[CheckedTask]
    engine_answered: bool  # False: no engine, so images and capacity were not checked
    oci_runtimes: tuple[str, ...] = ()  # the engine's (runsc: gVisor), when it answered


def check_tasks(path: Path) -> TasksCheck:
    """Load and validate a task or every task under a dataset folder, and say what each
    needs that this host lacks (asked of the engine when one answers).

    Raises:
        InputError: a task does not load (every problem, named by file and field).
    """
    from orchestrator.job.host_needs import host_needs
    from orchestrator.tasks import load_tasks

    tasks = load_tasks(path)
    runtime = info = None
    try:
        from orchestrator.runtime import open_runtime

        runtime = open_runtime()
        info = runtime.engine_facts()
    except InfraError:
        pass  # checked without an engine: said by engine_answered
    checked = [CheckedTask(task=t.name, path=str(t.path), content_hash=t.content_hash,
                           ignored_fields=t.ignored_fields, schema_warning=t.schema_warning,
                           needs=host_needs(t, runtime, info)) for t in tasks]
    return TasksCheck(checked, engine_answered=info is not None,
                      oci_runtimes=tuple(info.oci_runtimes) if info is not None else ())


# ---- tasks doctor --------------------------------------------------------------------------
def doctor_tasks(path: Path, *, jobs_dir: Path = Path("jobs"), n_concurrent: int = 2,
                 ca_bundle: Path | None = None, refresh: bool = False,
                 observers: Observers | None = None) -> list[Diagnosis]:
    """Run the oracle and nop once on every task under `path` (unless a cached verdict for
    the same content and CA bundle exists, or `refresh`) and judge whether each can measure
    an agent; tasks that do not load come back as `invalid` with their problems.

    Raises:
        InputError: the CA bundle is missing, or `path` holds no task folder.
        InfraError: the engine or the host failed.
    """
    from orchestrator.job import diagnose, invalid
    from orchestrator.runtime import open_runtime
    from orchestrator.tasks import load_tasks_lenient

    if ca_bundle is not None and not ca_bundle.is_file():
        raise InputError(f"--ca-bundle: {ca_bundle}: no such file")
    tasks, problems = load_tasks_lenient(path)
    runtime = open_runtime(max_pool_size=n_concurrent * 3 + 8)
    found = diagnose(runtime, tasks, jobs_dir, n_concurrent=n_concurrent, ca_bundle=ca_bundle,
                     refresh=refresh, observers=observers) if tasks else []
    return found + invalid(problems)


# ---- images bootstrap ----------------------------------------------------------------------
@dataclass(frozen=True)
class BaseReady:
    """An offline base, built (or there already)."""

    release: str  # Debian's: bookworm, trixie, bullseye
    image: str  # orchestra/base:<release>
    python: str  # the python3 it holds


def bootstrap_bases(releases: list[str] | None = None, *, force: bool = False) -> list[BaseReady]:
    """Build the offline bases from Debian packages (no registry needed), the releases at
    once (debootstrap waits on the mirror). None: the default releases.

    Raises:
        InputError: a release orchestra does not know.
        InfraError: the engine failed.
        BuildFailed: a base did not build.
    """
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator.runtime import open_runtime
    from orchestrator.tasks import RELEASES
    from orchestrator.trial import BOOTSTRAP_RELEASES, bootstrap_base

    chosen = list(releases or BOOTSTRAP_RELEASES)
    for name in chosen:
        if name not in RELEASES:
            raise InputError(f"--release: {name!r} is not one of {', '.join(RELEASES)}")
    runtime = open_runtime()
    with ThreadPoolExecutor(len(chosen)) as pool:
        images = list(pool.map(lambda r: bootstrap_base(runtime, r, force=force), chosen))
    return [BaseReady(name, image, RELEASES[name]) for name, image in zip(chosen, images, strict=True)]


# ---- agents --------------------------------------------------------------------------------
def install_agents(names: list[str], ca_bundle: Path | None = None) -> None:
    """Install these installed-CLI agents now (["all"]: every one), each with what it runs
    on (Node), instead of on first use.

    Raises:
        InputError: a name that is not an installed CLI.
        InfraError: an install failed.
    """
    from orchestrator.agents import INSTALLED, ensure_installed

    for name in (list(INSTALLED) if names == ["all"] else names):
        if name not in INSTALLED:
            raise InputError(f"--install: {name!r} is not one of {', '.join(INSTALLED)}")
        for recipe in INSTALLED[name].recipes():
            ensure_installed(recipe, ca_bundle)


class ListedAgent(AgentRow):
    """One row of `orchestra agents` (its --json too): the agent's row and the bytes its
    install folder takes on disk, measured."""

    size_bytes: int | None = None  # its folder's bytes on disk; None: built in, or not installed yet


def list_agents() -> list[ListedAgent]:
    """The agents `run --agent NAME` takes: the built-in ones, then the installed CLIs
    (kind, version, whether this host has installed it yet, and then its folder's bytes on
    disk: what `du -s -B1` says, each file counted once; a runtime several agents share,
    such as node, is not in it). Raises nothing."""
    import orchestrator
    from orchestrator.agents import INSTALLED, listing
    from orchestrator.models import AGENT_NAMES

    built_in = [AgentRow(name=n, kind="built-in", version=orchestrator.__version__, installed=True)
                for n in AGENT_NAMES if n not in INSTALLED]
    return [ListedAgent(**row.model_dump(), size_bytes=_bytes_on_disk(Path(row.path))
                        if row.installed and row.path else None)
            for row in built_in + listing()]


def _bytes_on_disk(folder: Path) -> int | None:
    """The blocks a folder's files take (st_blocks, as du counts them: a hard-linked file
    once, symbolic links not followed); None when the folder is gone."""
    import os

    if not folder.is_dir():
        return None
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:  # removed while walked
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total + os.lstat(folder).st_blocks * 512


# ---- cleanup -------------------------------------------------------------------------------
class ObjectInScope(BaseModel):
    """An engine object a clean-up would remove, as `cleanup --dry-run --json` prints it."""

    model_config = ConfigDict(frozen=True)

    kind: str  # container, network, volume; image (with images: a task image the prune would remove)
    name: str  # an image by its first tag
    job: str | None  # its job's label (None: none, and for an image)


@dataclass(frozen=True)
class CleanupPlan:
    """What a clean-up of this scope would remove (nothing is removed)."""

    scope: str  # said: "jobs whose orchestrator is gone", "job NAME", "every orchestra object"
    objects: list[ObjectInScope]


class Removed(BaseModel):
    """How many objects a clean-up removed, by kind (`images` only when asked to prune)."""

    containers: int = 0
    networks: int = 0
    volumes: int = 0
    disks: int = 0
    failed: int = 0  # objects that could not be removed (named in the log)
    images: int | None = None


@dataclass(frozen=True)
class Cleaned:
    scope: str
    removed: Removed


def cleanup_plan(job: str | None = None, everything: bool = False, images: bool = False,
                 keep_gb: float | None = None) -> CleanupPlan:
    """What `clean_up` with the same scope would remove: every orchestra object
    (everything), one job's, or (default) those of jobs whose orchestrator on this host is
    gone plus the idle pool networks; with `images`, the task images its prune would remove
    (keep_gb as for clean_up). Objects orchestra did not create are never listed.

    Raises:
        InputError: both job and everything.
        InfraError: no engine answers.
    """
    from orchestrator.host import LABEL_JOB, plan, prune_images, remove_idle

    runtime = _cleanup_runtime(job, everything)
    objects = [ObjectInScope(kind=r.kind, name=r.name, job=r.labels.get(LABEL_JOB))
               for r in plan(runtime, job, everything)]
    if job is None and not everything:
        objects += [ObjectInScope(kind="network", name=n, job="(idle, kept between jobs)")
                    for n in remove_idle(runtime, dry_run=True)]
    if images:
        objects += [ObjectInScope(kind="image", name=(i.tags or [i.id])[0], job=None)
                    for i in prune_images(runtime, keep_gb, dry_run=True)]
    return CleanupPlan(_scope(job, everything), objects)


def clean_up(job: str | None = None, everything: bool = False, images: bool = False,
             keep_gb: float | None = None) -> Cleaned:
    """Remove the containers, networks and volumes (and loop disks) in scope, as
    cleanup_plan lists them; with `images`, prune orchestra's task images too (keeping
    the most recently used up to keep_gb).

    Raises:
        InputError: both job and everything.
        InfraError: no engine answers.
    """
    from orchestrator.host import LABEL_JOB, prune_images, reap, reap_orphans, remove_idle
    from orchestrator.runtime import LABEL_KIND

    runtime = _cleanup_runtime(job, everything)
    if everything:
        counts = reap(runtime, LABEL_KIND)
    elif job is not None:
        counts = reap(runtime, f"{LABEL_JOB}={job}")
    else:
        counts = reap_orphans(runtime)
        counts["networks"] += len(remove_idle(runtime))
    removed = Removed(**counts)
    if images:
        removed.images = len(prune_images(runtime, keep_gb))
    return Cleaned(_scope(job, everything), removed)


def _cleanup_runtime(job: str | None, everything: bool) -> Runtime:
    from orchestrator.runtime import open_runtime

    if job is not None and everything:
        raise InputError("--job and --all: choose one")
    return open_runtime()


def _scope(job: str | None, everything: bool) -> str:
    return "every orchestra object" if everything else (
        f"job {job}" if job else "jobs whose orchestrator is gone")

