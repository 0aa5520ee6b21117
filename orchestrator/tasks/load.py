"""Find task directories, load and validate them, hash their content (DESIGN 2.1, 3.1)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from orchestrator.errors import InputError, validation_problems
from orchestrator.models import StepSection, TaskConfig, ignored_fields, name_problem
from orchestrator.paths import TaskPaths, dockerfile_in, verifier_dockerfile
from orchestrator.tasks.compose import Compose, load_compose
from orchestrator.tasks.compose import find as find_compose
from orchestrator.tasks.dockerfile import read_dockerfile
from orchestrator.tasks.inputs import MAX_TOML_BYTES, links_out, load_toml, read_capped
from orchestrator.tasks.memory import EngramSeed, FactFile, load_engram_seeds, load_fact_files
from orchestrator.util import JsonObject

MAX_INSTRUCTION_BYTES = 1024 * 1024
HASH_CHUNK = 1024 * 1024
_NAME = re.compile(r"[^a-z0-9._-]+")


@dataclass(frozen=True)
class Task:
    """A validated task directory."""

    path: Path
    name: str  # dataset/task
    config: TaskConfig
    instruction: str
    content_hash: str  # the whole directory
    environment_hash: str  # environment/ only: the image tag
    seeds: tuple[EngramSeed, ...] = ()  # memory/seeds.toml
    facts: tuple[FactFile, ...] = ()  # memory/project|global/*.md
    step: str | None = None  # set on the view of one of Harbor's [[steps]]
    compose: Compose | None = field(default=None, compare=False)  # docker-compose.yaml sidecars

    @property
    def paths(self) -> TaskPaths:
        """Where its parts are (task.toml, instruction, environment/, tests/, solution/)."""
        return TaskPaths(self.path)

    @property
    def short_name(self) -> str:
        return self.name.split("/")[-1]

    @property
    def step_dir(self) -> Path | None:
        return self.paths.step(self.step).root if self.step else None

    @property
    def tests_dirs(self) -> tuple[Path, ...]:
        """tests/ copied to /tests in this order (a step's own tests overlay the task's)."""
        dirs = [self.paths.tests] + ([self.paths.step(self.step).tests] if self.step else [])
        return tuple(d for d in dirs if d.is_dir())

    @property
    def solution_dir(self) -> Path:
        return (self.paths.step(self.step) if self.step else self.paths).solution

    @property
    def solve_sh(self) -> Path:
        """The oracle's script (the step's, on a step's view)."""
        return (self.paths.step(self.step) if self.step else self.paths).solve_sh

    @property
    def workdir_seed(self) -> Path | None:
        """A step's workdir/ (uploaded to the workdir before its agent runs)."""
        return self.step_dir / "workdir" if self.step_dir else None

    def step_view(self, step: StepSection) -> Task:
        """The task as one step sees it: its instruction, tests, solution, and the step's
        [agent]/[verifier] settings over the task's (verifier.env merged)."""
        agent = self.config.agent.model_copy(
            update={k: getattr(step.agent, k) for k in step.agent.model_fields_set})
        verifier = self.config.verifier.model_copy(update={
            **{k: getattr(step.verifier, k) for k in step.verifier.model_fields_set},
            "env": {**self.config.verifier.env, **step.verifier.env}})
        config = self.config.model_copy(update={
            "agent": agent, "verifier": verifier,
            "artifacts": list(self.config.artifacts) + list(step.artifacts)})
        return dataclasses.replace(self, config=config, step=step.name,
                                   instruction=read_capped(self.paths.step(step.name).instruction,
                                                           MAX_INSTRUCTION_BYTES))

    @property
    def ignored_fields(self) -> list[str]:
        """task.toml keys no model here defines: accepted as Harbor accepts them, listed."""
        return ignored_fields(self.config)

    @property
    def schema_warning(self) -> str | None:
        """schema_version is read, never gated (Harbor never branches on it): a major
        version Harbor has not published is a warning, not a refusal."""
        version = self.config.schema_version or self.config.version
        if version is None or version.split(".")[0] == "1":
            return None
        return f"schema_version {version!r} is not one Harbor defines (1.x); read as 1.x"

    @property
    def uses_relay(self) -> bool:
        return self.config.relay.enabled or bool(self.seeds)

    @property
    def has_solution(self) -> bool:
        if self.config.steps:
            return all(self.paths.step(s.name).solve_sh.is_file() for s in self.config.steps)
        return self.paths.solve_sh.is_file()


def hash_tree(root: Path) -> str:
    """sha256 over relative paths, modes and contents, in sorted order (a FIFO or device
    node by its kind: two folders that differ in one never hash the same)."""
    digest = hashlib.sha256()
    if not root.exists():
        return digest.hexdigest()[:16]
    for path in sorted(p for p in root.rglob("*") if not p.is_dir() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if "__pycache__" in rel:
            continue
        digest.update(rel.encode() + b"\0")
        kind = _special(path)
        if path.is_symlink():
            digest.update(b"link:" + str(path.readlink()).encode())
        elif kind:  # a FIFO or a device node: never read (a FIFO would block), its kind hashed
            digest.update(f"{kind}:{os.lstat(path).st_rdev}".encode())
        else:
            digest.update(oct(path.stat().st_mode & 0o111).encode())
            with open(path, "rb") as handle:  # streamed: a 1 GiB data file costs no 1 GiB
                while chunk := handle.read(HASH_CHUNK):
                    digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _special(path: Path) -> str | None:
    """'FIFO', 'socket', 'character device' or 'block device' for such a node, else None."""
    mode = os.lstat(path).st_mode
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return None


def _special_files(root: Path) -> list[str]:
    """A problem per FIFO, socket or device node in the task folder: Harbor would copy them
    into images and containers (a FIFO blocks its reader), and they hold no content."""
    problems = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            kind = _special(path)
            if kind:
                problems.append(f"{path}: a {kind}; a task folder holds files, folders and links only")
    return problems


def _dataset_name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def load_task(path: Path) -> Task:
    """Validate one task directory; raise InputError listing every problem found."""
    path = path.resolve()
    outside = links_out(path) or _special_files(path)  # before anything is read
    if outside:
        raise InputError(outside)
    paths = TaskPaths(path)
    config, raw, problems = _read_config(paths.config)
    # A multi-step task keeps its instruction (and tests) per step, under steps/<name>/.
    required = [paths.config] + ([] if raw.get("steps") else [paths.instruction, paths.test_sh])
    problems = [f"{file}: missing (every task needs {file.relative_to(path)})"
                for file in required if not file.is_file()] + problems
    if config is not None:
        problems += _step_problems(path, config)
    compose = None
    compose_file = find_compose(paths.environment)
    if compose_file is not None:
        try:
            compose = load_compose(compose_file)
        except InputError as exc:
            problems.extend(exc.problems)
    instruction = paths.instruction
    if config is not None and not config.task.name:
        why = name_problem(_dataset_name(path))
        if why:
            problems.append(f"{path}: the folder's name as the task's name: {why} (rename "
                            "the folder or set [task] name)")
    if config is not None:
        if not config.environment.docker_image and not paths.dockerfile.is_file():
            problems.append(f"{paths.dockerfile}: missing "
                            "(add one or set [environment] docker_image)")
        builds = [paths.dockerfile, verifier_dockerfile(paths.tests)]  # every one a trial builds
        builds += [verifier_dockerfile(paths.step(s.name).tests) for s in config.steps or []]
        builds += [dockerfile_in(paths.environment / s.build.context)
                   for s in (compose.sidecars.values() if compose else []) if s.build]
        for dockerfile in builds:
            try:
                if dockerfile.is_file():
                    read_dockerfile(dockerfile)  # capped before reading, UTF-8
            except InputError as exc:
                problems.extend(exc.problems)
        if config.steps and not instruction.is_file():
            instruction = paths.step(config.steps[0].name).instruction
        problems += _instruction_problems(instruction, config)
    seeds: tuple[EngramSeed, ...] = ()
    facts: tuple[FactFile, ...] = ()
    try:
        seeds = load_engram_seeds(path)
    except InputError as exc:
        problems.extend(exc.problems)
    try:
        facts = load_fact_files(path)
    except InputError as exc:
        problems.extend(exc.problems)
    if problems:
        raise InputError(problems)
    assert config is not None
    text = read_capped(instruction, MAX_INSTRUCTION_BYTES)  # not UTF-8: InputError naming it
    return Task(path=path, name=config.task.name or _dataset_name(path), config=config,
                instruction=text, content_hash=hash_tree(path),
                environment_hash=hash_tree(paths.environment), seeds=seeds, facts=facts,
                compose=compose)


def _read_config(toml_path: Path) -> tuple[TaskConfig | None, JsonObject, list[str]]:
    """task.toml as Harbor's model reads it: (config or None, the raw table, problems)."""
    if not toml_path.is_file():
        return None, {}, []
    raw: JsonObject = {}
    try:
        raw = load_toml(toml_path, MAX_TOML_BYTES)
        return TaskConfig.model_validate(raw), raw, []
    except InputError as exc:
        return None, raw, exc.problems
    except ValidationError as exc:
        return None, raw, validation_problems(toml_path, exc, explain_unknown=True)


def _step_problems(path: Path, config: TaskConfig) -> list[str]:
    """Each step's instruction and tests (its own, or the task's)."""
    problems = []
    for step in config.steps or []:
        own = TaskPaths(path).step(step.name)
        if not own.instruction.is_file():
            problems.append(f"{own.instruction}: missing (every step needs one)")
        if not own.test_sh.is_file() and not TaskPaths(path).test_sh.is_file():
            problems.append(f"{own.test_sh}: missing (a step needs its own "
                            "tests/test.sh or the task's)")
    return problems


def _instruction_problems(instruction: Path, config: TaskConfig) -> list[str]:
    if not instruction.is_file():
        return []
    size = instruction.stat().st_size
    limit = 65_535 if config.relay.enabled else MAX_INSTRUCTION_BYTES
    if size > limit:
        return [f"{instruction}: {size} bytes; the limit is {limit} "
                f"({'a relay message' if limit == 65_535 else 'an instruction'})"]
    return []


def find_task_dirs(root: Path) -> list[Path]:
    """A task directory holds task.toml; a dataset is any folder above some. Below a task
    nothing more is looked for: a task.toml inside a task's own files (a task about
    writing tasks ships one as data) is data, as Harbor takes it."""
    root = root.resolve()
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    found, todo = [], [root]
    while todo:
        folder = todo.pop()
        if TaskPaths(folder).config.is_file():
            found.append(folder)
            continue
        try:
            todo.extend(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                        and not p.name.startswith("."))
        except OSError:
            continue
    if not found:
        raise InputError(f"{root}: no task.toml found below this path")
    return sorted(found)


def load_tasks_lenient(root: Path) -> tuple[list[Task], dict[Path, list[str]]]:
    """Every task under root that loads, and the problems of each one that does not (the
    doctor names them; `run --skip-broken` leaves them out). Whatever reading one task
    raised is that task's problem, never the dataset's (issue 56)."""
    tasks, problems = [], {}
    for task_dir in find_task_dirs(root):
        try:
            tasks.append(load_task(task_dir))
        except InputError as exc:
            problems[task_dir] = list(exc.problems)
        except Exception as exc:  # noqa: BLE001 - any failure to read a task is its refusal
            problems[task_dir] = [f"{task_dir}: could not be read ({type(exc).__name__}: "
                                  f"{str(exc)[:300]}); a task orchestra cannot read is refused"]
    return tasks, problems


def load_tasks(root: Path) -> list[Task]:
    """Load every task under root; collect the problems of all of them before failing."""
    tasks, invalid = load_tasks_lenient(root)
    if invalid:
        raise InputError([problem for problems in invalid.values() for problem in problems])
    names = [t.name for t in tasks]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InputError(f"{root}: duplicate task names: {', '.join(duplicates)}")
    return tasks


def image_repository(task: Task) -> str:
    """orchestra/task/<name> with the name made safe for a Docker reference."""
    parts = [_NAME.sub("-", part.lower()).strip("-.") or "task" for part in task.name.split("/")]
    return "orchestra/task/" + "/".join(parts)
