"""Seed sources and their delivery (DESIGN 2 step 5).

Engram seeds (`memory/seeds.toml`, `[[seed]] slug, value`) are written inside the agent
container by `mem set <slug> -`, as the orchestrator (its own key, in the container's
environment), the value on stdin. Any failure is a launch error naming the slug.
Policy memory-off seeds nothing at all.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import InputError
from orchestrator.paths import AGENT_STACK
from orchestrator.relay.slugs import MAX_VALUE_BYTES, SlugError, normalise

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
        parsed = SeedsFile.model_validate(tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from exc
    except ValidationError as exc:
        raise InputError([f"{path}: field '{'.'.join(str(p) for p in e['loc'])}': {e['msg']}"
                          for e in exc.errors()]) from exc
    slugs = [normalise(s.slug) for s in parsed.seed]
    if len(set(slugs)) != len(slugs):
        raise InputError(f"{path}: field 'seed': duplicate slugs")
    return tuple(parsed.seed)


class SeedError(Exception):
    """A seed could not be delivered: the trial is a launch error, not a 0."""


@dataclass
class SeedRecord:
    slug: str
    exit_code: int | None
    seconds: float
    via: str = "mem set <slug> -"


def seed_engrams(runtime, container: str, seeds: tuple[EngramSeed, ...],
                 user: str | None = None) -> list[SeedRecord]:
    records = []
    for seed in seeds:
        started = time.monotonic()
        code, output = runtime.exec_stdin(container, [MEM, "set", seed.slug, "-"],
                                          seed.value.encode(), user=user)
        records.append(SeedRecord(slug=seed.slug, exit_code=code,
                                  seconds=round(time.monotonic() - started, 4)))
        if code != 0:
            raise SeedError(f"seed {seed.slug!r}: `mem set {seed.slug} -` exited {code}: "
                            f"{output.decode(errors='replace').strip()[-500:]}")
    return records
