"""task.toml: a superset of Harbor's task format (DESIGN 3.1).

Unknown keys are errors everywhere except in [metadata]. Fields of Harbor's schema that
orchestra cannot honour (GPUs) are accepted by the parser and refused by a validator with
a message naming them, never silently ignored.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_FACTOR_MB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_to_mb(text: str) -> int:
    """'2G' -> 2048, '512M' -> 512 (Harbor's legacy memory/storage strings)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. '512M' or '2G')")
    return int(float(match.group(1)) * _FACTOR_MB[match.group(2).upper()])


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskSection(_Section):
    name: str | None = None
    description: str = ""
    keywords: list[str] = []


class Metadata(BaseModel):
    """Free-form except for the fields orchestra reads."""

    model_config = ConfigDict(extra="allow")
    evaluation_layer: Literal["regression", "workflow"] | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = []
    # memorybench scenario class; `class` is a Python keyword, hence the alias.
    scenario_class: str | None = Field(default=None, alias="class")


class AgentSection(_Section):
    timeout_sec: float = Field(default=600.0, gt=0)
    user: str | None = None


class VerifierSection(_Section):
    timeout_sec: float = Field(default=120.0, gt=0)
    env: dict[str, str] = {}
    environment_mode: Literal["shared", "separate"] = "shared"
    user: str | None = None


class SolutionSection(_Section):
    env: dict[str, str] = {}


class EnvironmentSection(_Section):
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=2048, ge=16)
    storage_mb: int = Field(default=10240, ge=16)
    pids_limit: int = Field(default=1024, ge=8)
    network_mode: Literal["public", "none"] = "public"
    build_timeout_sec: float = Field(default=600.0, gt=0)
    docker_image: str | None = None
    workdir: str = "/app"
    env: dict[str, str] = {}
    drop_all_capabilities: bool = False
    # Harbor fields: legacy size strings, internet switch, GPUs (refused below).
    memory: str | None = None
    storage: str | None = None
    allow_internet: bool | None = None
    gpus: int = 0
    gpu_types: list[str] | None = None

    @field_validator("workdir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path such as /app")
        return value

    @model_validator(mode="after")
    def _harbor_compat(self) -> EnvironmentSection:
        if self.gpus:
            raise ValueError("gpus: orchestra cannot give a trial GPUs; remove gpus or set 0")
        if self.gpu_types:
            raise ValueError("gpu_types: orchestra cannot give a trial GPUs; remove gpu_types")
        if self.memory is not None:
            self.memory_mb = size_to_mb(self.memory)
        if self.storage is not None:
            self.storage_mb = size_to_mb(self.storage)
        if self.allow_internet is False:
            self.network_mode = "none"
        return self


class DirectoryEntry(_Section):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    role: str = "actor"


class ScriptedMessage(_Section):
    author: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    content: str = Field(min_length=1)
    reply_to_instruction: bool = False
    mentions: list[str] = []


class RelaySection(_Section):
    enabled: bool = False
    user: str = "user"  # the user's display name
    directory: list[DirectoryEntry] = []
    scripted: list[ScriptedMessage] = []
    observed_channels: list[str] = []
    evidence_required: bool = True


class MemorySection(_Section):
    markers: list[str] = []
    markers_in_prefix: bool = False
    # Policy flags the agent always runs with on this task (e.g. no_memory: nothing is
    # injected into its prompt; it must use its memory tools itself).
    flags: list[str] = []


class TaskConfig(_Section):
    """The parsed task.toml."""

    schema_version: str | None = None
    version: str | None = None  # Harbor's legacy name for schema_version
    source: str | None = None
    task: TaskSection = TaskSection()
    metadata: Metadata = Metadata()
    agent: AgentSection = AgentSection()
    verifier: VerifierSection = VerifierSection()
    solution: SolutionSection = SolutionSection()
    environment: EnvironmentSection = EnvironmentSection()
    relay: RelaySection = RelaySection()
    memory: MemorySection = MemorySection()
    artifacts: list[str] = []
    steps: list[dict] | None = None

    @field_validator("artifacts")
    @classmethod
    def _artifacts_absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"{path!r} must be an absolute path without '..'")
        return paths

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> TaskConfig:
        if self.steps is not None:
            raise ValueError("steps: multi-step tasks are not supported by orchestra")
        version = self.schema_version or self.version
        if version is not None and not version.startswith("1"):
            raise ValueError(f"schema_version: {version!r} is not supported (expected 1.x)")
        return self
