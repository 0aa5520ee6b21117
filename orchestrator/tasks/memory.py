"""Seed sources and their delivery (DESIGN 2 step 5).

Engram seeds (`memory/seeds.toml`, `[[seed]] slug, value`) are written inside the agent
container by `mem set <slug> -`, as the orchestrator (its own key, in the container's
environment), the value on stdin. Any failure is a launch error naming the slug.
Policy memory-off seeds nothing at all.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import InputError, validation_problems
from orchestrator.models import EngramSeeded
from orchestrator.paths import AGENT_STACK
from orchestrator.tasks.inputs import (
    MAX_SEEDS_BYTES,
    MAX_YAML_BYTES,
    load_toml,
    load_yaml,
    read_capped,
)
from orchestrator.tasks.slugs import MAX_VALUE_BYTES, SlugError, normalise
from orchestrator.util import JsonObject

MEM = f"{AGENT_STACK}/bin/mem"


class EngramSeed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    slug: str
    value: str = Field(min_length=1)

    @field_validator("slug")
    @classmethod
    def _slug(cls, value: str) -> str:
        try:
            normalise(value)
        except SlugError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("value")
    @classmethod
    def _size(cls, value: str) -> str:
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise ValueError(f"longer than {MAX_VALUE_BYTES} bytes")
        return value


class SeedsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: list[EngramSeed] = []


def load_engram_seeds(task_dir: Path) -> tuple[EngramSeed, ...]:
    path = task_dir / "memory" / "seeds.toml"
    if not path.is_file():
        return ()
    try:
        parsed = SeedsFile.model_validate(load_toml(path, MAX_SEEDS_BYTES))
    except ValidationError as exc:
        raise InputError(validation_problems(path, exc)) from exc
    slugs = [normalise(s.slug) for s in parsed.seed]
    if len(set(slugs)) != len(slugs):
        raise InputError(f"{path}: field 'seed': duplicate slugs")
    return tuple(parsed.seed)


class FactMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    scope: str


class FactFrontmatter(BaseModel):
    """The YAML frontmatter of a memorybench fact file."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    description: str = ""
    metadata: FactMetadata
    subject_key: str | None = None
    keywords: list[str] = []
    activation: str | None = None
    volatility: str | None = None
    created: str | None = None
    updated: str | None = None

    @field_validator("activation")
    @classmethod
    def _activation(cls, value: str | None) -> str | None:
        if value not in (None, "pinned"):
            raise ValueError("only 'pinned' is known")
        return value

    @field_validator("created", "updated", mode="before")
    @classmethod
    def _date_text(cls, value: object) -> object:
        return str(value) if value is not None else None


@dataclass(frozen=True)
class FactFile:
    scope: str  # project | global
    name: str  # file name, e.g. fast-check-command.md
    source: Path  # on the host; never inside a container
    text: str
    meta: FactFrontmatter
    body: str

    @property
    def relative(self) -> str:
        return f"memory/{self.scope}/{self.name}"


def _split_frontmatter(path: Path, text: str) -> tuple[JsonObject, str]:
    if not text.startswith("---"):
        raise InputError(f"{path}: no YAML frontmatter (the file must start with '---')")
    end = text.find("\n---", 3)
    if end < 0:
        raise InputError(f"{path}: frontmatter is not closed with '---'")
    data = load_yaml(text[3:end], path) or {}  # no aliases, depth capped
    if not isinstance(data, dict):
        raise InputError(f"{path}: frontmatter must be a mapping")
    return data, text[end + 4:].strip()


MAX_FACT_FILES = 1000  # memory/project and memory/global together
MAX_FACTS_BYTES = 16 * 1024 * 1024  # all of them: each is held for the trial's seed archive


def load_fact_files(task_dir: Path) -> tuple[FactFile, ...]:
    """memory/project/*.md and memory/global/*.md, each at most MAX_YAML_BYTES, at most
    MAX_FACT_FILES of them and MAX_FACTS_BYTES in all (counted and summed before one is
    read); InputError naming every problem."""
    found = [(scope, path) for scope in ("project", "global")
             for path in sorted((task_dir / "memory" / scope).glob("*.md"))]
    if len(found) > MAX_FACT_FILES:
        raise InputError(f"{task_dir / 'memory'}: {len(found)} fact files; the limit is {MAX_FACT_FILES}")
    total = sum(path.stat().st_size for _, path in found if path.is_file())
    if total > MAX_FACTS_BYTES:
        raise InputError(f"{task_dir / 'memory'}: fact files of {total} bytes in all; the limit is "
                         f"{MAX_FACTS_BYTES}")
    facts, problems = [], []
    for scope, path in found:
        try:
            text = read_capped(path, MAX_YAML_BYTES)
            data, body = _split_frontmatter(path, text)
            meta = FactFrontmatter.model_validate(data)
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        except UnicodeDecodeError:
            problems.append(f"{path}: not UTF-8 text")
            continue
        except ValidationError as exc:
            problems.extend(validation_problems(path, exc))
            continue
        facts.append(FactFile(scope=scope, name=path.name, source=path, text=text,
                              meta=meta, body=body))
    if problems:
        raise InputError(problems)
    return tuple(facts)


def _workspace_slug(workdir: str) -> str:
    """/app -> -app (the same rule as the agent stack's orchestra_memory.workspace_slug)."""
    return workdir.rstrip("/").replace("/", "-") or "-"


@dataclass(frozen=True)
class StateRoots:
    """A fresh, randomly named state root and TMPDIR per trial (no task id, no workdir name)."""

    state_home: str
    tmpdir: str

    @classmethod
    def fresh(cls) -> StateRoots:
        return cls(state_home=f"/var/tmp/.s-{secrets.token_hex(8)}",
                   tmpdir=f"/tmp/.t-{secrets.token_hex(8)}")

    def env(self, workdir: str) -> dict[str, str]:
        return {"ORCHESTRA_STATE_HOME": self.state_home, "TMPDIR": self.tmpdir,
                "ORCHESTRA_WORKDIR": workdir}


def file_seed_archive(roots: StateRoots, workdir: str, facts: tuple[FactFile, ...],
                      extra: dict[str, bytes] | None = None) -> bytes:
    """The state root and TMPDIR, with the facts in place (none for memory-off); `extra`:
    more files for the same copy ({absolute path: content}, e.g. the agent's hand-over)."""
    from orchestrator.archive import tar_files

    state = roots.state_home.lstrip("/")
    project = f"{state}/projects/{_workspace_slug(workdir)}/memory"
    glob = f"{state}/memory/global"
    files = {f"{project if f.scope == 'project' else glob}/{f.name}": f.text.encode()
             for f in facts}
    files.update({path.lstrip("/"): content for path, content in (extra or {}).items()})
    dirs = [state, f"{state}/projects", f"{state}/projects/{_workspace_slug(workdir)}", project,
            f"{state}/memory", glob, roots.tmpdir.lstrip("/")]
    return tar_files(files, dirs=dirs)


class SeedError(Exception):
    """A seed could not be delivered: the trial is a launch error, not a 0."""


class _Outcome(Protocol):
    @property
    def exit_code(self) -> int | None: ...
    @property
    def output(self) -> bytes: ...


class _Execs(Protocol):
    """The runtime as seeding uses it (runtime/ is a layer above tasks/: not imported)."""

    def exec(self, container: str, command: list[str], *, env: dict[str, str] | None = None,
             user: str | None = None, stdin: bytes | None = None, capture: int = 0) -> _Outcome: ...


def seed_engrams(runtime: _Execs, container: str, seeds: tuple[EngramSeed, ...],
                 user: str | None = None, env: dict[str, str] | None = None) -> list[EngramSeeded]:
    records = []
    for seed in seeds:
        started = time.monotonic()
        outcome = runtime.exec(container, [MEM, "set", seed.slug, "-"], stdin=seed.value.encode(),
                               capture=65536, user=user, env=env)
        code, output = outcome.exit_code, outcome.output
        records.append(EngramSeeded(slug=seed.slug, exit_code=code,
                                  seconds=round(time.monotonic() - started, 4)))
        if code != 0:
            raise SeedError(f"seed {seed.slug!r}: `mem set {seed.slug} -` exited {code}: "
                            f"{output.decode(errors='replace').strip()[-500:]}")
    return records
