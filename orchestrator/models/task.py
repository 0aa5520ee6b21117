"""task.toml: a superset of Harbor's task format (DESIGN 3.1), after Harbor's
`src/harbor/models/task/config.py` (schema 1.x).

Harbor's models use pydantic's default (extra="ignore"), so published datasets carry keys
of their own (`category`, `difficulty`, `[environment] image`, step `dependencies`...).
We accept them as Harbor does, but never silently: every key no model here defines is
kept (extra="allow") and listed by `ignored_fields()` as a dotted path, which `tasks
check`, the run's output and each trial's result (`ignored_fields`) show. A known key of
the wrong type is still an error naming the field. Fields orchestra knows and cannot
honour (Windows, GPUs, TPUs, MCP servers, skills, verifier collect hooks, sidecar
artifacts) are refused with "orchestra cannot honour `<field>`". `schema_version` (or
its legacy name `version`) is read and recorded, never gated: Harbor never branches on it.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from orchestrator.util import JsonObject

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_FACTOR_MB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_to_mb(text: str) -> int:
    """'2G' -> 2048, '512M' -> 512 (Harbor's legacy memory/storage strings)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (use e.g. '512M' or '2G')")
    mb = float(match.group(1)) * _FACTOR_MB[match.group(2).upper()]
    if not mb < 2**53:  # 1e400 is inf: a size, but not one
        raise ValueError(f"not a usable size: {text[:40]!r}")
    return int(mb)


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")  # listed by ignored_fields(), never silent


def cannot_honour(field: str, why: str) -> ValueError:
    return ValueError(f"orchestra cannot honour `{field}`: {why}")


NetworkMode = Literal["public", "no-network", "allowlist", "none"]  # none: orchestra's old name


class Author(_Section):
    name: str
    email: str | None = None


MAX_NAME_BYTES = 200  # a trial folder is <last part>__<12 hex>: within a file name's 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")


def name_problem(name: str) -> str | None:
    """Why a task name cannot name trial folders, images and report rows, else None: names
    are never paths, a line break in one could forge a row of report.md, and a bidi control
    (U+202E) or a zero-width character would show another name than the one it is."""
    if _CONTROL.search(name):
        return f"{name[:60]!r}: holds a control character (a NUL, a line break...)"
    hidden = next((c for c in name if unicodedata.category(c) == "Cf"), None)
    if hidden is not None:  # bidi controls reorder what a report shows; zero-widths hide
        return (f"{name[:60]!r}: holds U+{ord(hidden):04X} ({unicodedata.name(hidden, 'a format character')}), "
                "which reorders or hides text in a report")
    if "" in name.split("/"):
        return f"{name[:60]!r}: an empty part (a leading, trailing or doubled '/'): names are never paths"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"{len(name.encode())} bytes; the limit is {MAX_NAME_BYTES}"
    if any(part in (".", "..") for part in name.split("/")):
        return f"{name[:60]!r}: '.' and '..' are not name parts"
    return None


class TaskSection(_Section):
    name: str | None = None

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        why = value is not None and name_problem(value)
        if why:
            raise ValueError(why)
        return value
    description: str = ""
    keywords: list[str] = []
    authors: list[Author] = []
    version: str | None = None


class PhaseNetwork(_Section):
    """Harbor's per-phase network override ([agent] and [verifier])."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @model_validator(mode="after")
    def _policy(self) -> PhaseNetwork:
        _check_network(self.network_mode, self.allowed_hosts)
        return self


def _check_network(mode: str | None, hosts: list[str] | None) -> None:
    """Harbor's rules: allowed_hosts only with allowlist; entries are host names, `*.`
    wildcards, IP addresses or CIDR ranges, never URLs, ports or paths (egress.py)."""
    if hosts and mode != "allowlist":
        raise ValueError("allowed_hosts is only valid with network_mode = 'allowlist'")
    for host in hosts or []:
        entry = host.strip().lower().rstrip(".")
        if not entry:
            raise ValueError("allowed_hosts entries must be non-empty")
        if "/" in entry or ":" in entry:
            try:
                ipaddress.ip_network(entry, strict=True)
                continue
            except ValueError:
                raise ValueError(f"allowed_hosts: {host!r}: entries are host names, IP addresses "
                                 "or CIDR ranges, not URLs, ports or paths") from None
        if "*" in entry and (not entry.startswith("*.") or "*" in entry[2:] or len(entry) < 3):
            raise ValueError(f"allowed_hosts: {host!r}: a wildcard is a leading '*.' only")


# Bounds on every value a task sets (DESIGN 4: its waits are capped, its quotas usable):
# beyond them a value is a problem at load naming the field, never a retried launch error.
MAX_TIMEOUT_SEC = 7 * 24 * 3600.0  # any phase, any build
MAX_HEALTH_WAIT_SEC = 3600.0  # a healthcheck's start period
MAX_HEALTH_STEP_SEC = 600.0  # its interval and each probe's timeout
MAX_HEALTH_RETRIES = 100
MIN_MB = 16
MAX_MEMORY_MB = 1024 * 1024  # 1 TiB
MAX_STORAGE_MB = 16 * 1024 * 1024  # 16 TiB
RESERVED_DIRS = ("/logs", "/tests", "/solution", "/opt/orchestra")  # orchestra's own mounts


def _timeout(default: float) -> float:
    return Field(default=default, gt=0, le=MAX_TIMEOUT_SEC, allow_inf_nan=False)


class Healthcheck(_Section):
    """Docker HEALTHCHECK semantics, run before the agent starts."""

    command: str
    interval_sec: float = Field(default=5.0, ge=0, le=MAX_HEALTH_STEP_SEC, allow_inf_nan=False)
    timeout_sec: float = Field(default=30.0, gt=0, le=MAX_HEALTH_STEP_SEC, allow_inf_nan=False)
    start_period_sec: float = Field(default=0.0, ge=0, le=MAX_HEALTH_WAIT_SEC, allow_inf_nan=False)
    start_interval_sec: float = Field(default=5.0, ge=0, le=MAX_HEALTH_STEP_SEC, allow_inf_nan=False)
    retries: int = Field(default=3, ge=1, le=MAX_HEALTH_RETRIES)


class Metadata(BaseModel):
    """Free-form except for the fields orchestra reads."""

    model_config = ConfigDict(extra="allow")
    evaluation_layer: Literal["regression", "workflow"] | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = []
    # memorybench scenario class; `class` is a Python keyword, hence the alias.
    scenario_class: str | None = Field(default=None, alias="class")


class AgentSection(PhaseNetwork):
    timeout_sec: float = _timeout(600.0)
    user: str | None = None

    @field_validator("user", mode="before")
    @classmethod
    def _uid(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value


class VerifierSection(PhaseNetwork):
    timeout_sec: float = _timeout(600.0)  # Harbor's default
    env: dict[str, str] = {}  # ${VAR} and ${VAR:-default} expand from the host, as in Harbor
    environment_mode: Literal["shared", "separate", "snapshot"] = "shared"
    user: str | None = None
    environment: JsonObject | None = None
    collect: list[JsonObject] = []

    @field_validator("user", mode="before")
    @classmethod
    def _uid(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _honourable(self) -> VerifierSection:
        if self.environment is not None:
            EnvironmentSection.model_validate(self.environment)  # its errors name the field
            if "environment_mode" not in self.model_fields_set:  # Harbor: it implies separate
                self.environment_mode = "separate"
        if self.collect:
            raise cannot_honour("verifier.collect", "collect hooks in sidecar services are "
                                "not supported yet")
        return self


class SolutionSection(_Section):
    env: dict[str, str] = {}


class EnvironmentSection(_Section):
    cpus: float = Field(default=1.0, ge=0.01, le=1024, allow_inf_nan=False)
    memory_mb: int = Field(default=2048, ge=MIN_MB, le=MAX_MEMORY_MB)
    storage_mb: int = Field(default=10240, ge=MIN_MB, le=MAX_STORAGE_MB)
    pids_limit: int = Field(default=1024, ge=8, le=4_194_304)
    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] | None = None
    build_timeout_sec: float = _timeout(600.0)
    docker_image: str | None = None
    workdir: str = "/app"
    env: dict[str, str] = {}
    drop_all_capabilities: bool = False
    healthcheck: Healthcheck | None = None
    # Harbor fields: legacy size strings, internet switch, and what orchestra refuses below.
    memory: str | None = None
    storage: str | None = None
    allow_internet: bool | None = None
    os: Literal["linux", "windows"] = "linux"
    gpus: int | None = 0
    gpu_types: list[str] | None = None
    tpu: JsonObject | None = None
    mcp_servers: list[JsonObject] = []
    skills_dir: str | None = None

    @field_validator("workdir", mode="before")
    @classmethod
    def _absolute(cls, value: object) -> object:
        if value is None:
            return "/app"
        if not str(value).startswith("/"):
            raise ValueError("must be an absolute path such as /app")
        path = posixpath.normpath(str(value))
        if any(path == d or path.startswith(d + "/") for d in RESERVED_DIRS):
            raise ValueError(f"{value!r} is orchestra's ({', '.join(RESERVED_DIRS)} are mounted "
                             "over or emptied by orchestra); use e.g. /app")
        return value

    @field_validator("memory", "storage")
    @classmethod
    def _size(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            _bounded_mb(value, MAX_MEMORY_MB if info.field_name == "memory" else MAX_STORAGE_MB)
        return value

    @model_validator(mode="after")
    def _harbor_compat(self) -> EnvironmentSection:
        if self.os == "windows":
            raise cannot_honour("environment.os = 'windows'", "trials run in Linux containers")
        if self.gpus:
            raise cannot_honour("environment.gpus", "no GPUs here; remove gpus or set 0")
        if self.tpu:
            raise cannot_honour("environment.tpu", "no TPUs here")
        if self.mcp_servers:
            raise cannot_honour("environment.mcp_servers", "orchestra does not start MCP "
                                "servers for agents yet")
        if self.skills_dir:
            raise cannot_honour("environment.skills_dir", "agent skills are not installed "
                                "by orchestra yet")
        _check_network(self.network_mode, self.allowed_hosts)
        if self.memory is not None:
            self.memory_mb = size_to_mb(self.memory)  # bounded by _size
        if self.storage is not None:
            self.storage_mb = size_to_mb(self.storage)
        if self.allow_internet is False:
            self.network_mode = "no-network"
        if self.network_mode == "none":
            self.network_mode = "no-network"
        return self


def _bounded_mb(text: str, most: int) -> int:
    """Harbor's size string in MB, within [MIN_MB, most] (`0M` is no limit to Docker)."""
    mb = size_to_mb(text)
    if not MIN_MB <= mb <= most:
        raise ValueError(f"{text!r} is {mb} MB; it must be between {MIN_MB} MB and {most} MB")
    return mb


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


class StepSection(_Section):
    """One of Harbor's `[[steps]]`: its own instruction, tests and solution under
    steps/<name>/, run in turn in the same environment."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    agent: AgentSection = AgentSection()
    verifier: VerifierSection = VerifierSection()
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None
    artifacts: list[str] = []

    @field_validator("artifacts", mode="before")
    @classmethod
    def _artifacts(cls, entries: Iterable[object] | None) -> list[str]:
        return TaskConfig._artifacts(entries)


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
    steps: list[StepSection] | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None

    @field_validator("schema_version", "version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> object:
        return str(value) if isinstance(value, (int, float)) else value

    @field_validator("artifacts", mode="before")
    @classmethod
    def _artifacts(cls, entries: Iterable[object] | None) -> list[str]:
        """Paths, or Harbor's tables {source, destination, exclude, service}: a table
        naming only `source` (service main) is that path; the rest cannot be honoured."""
        paths = []
        for entry in entries or []:
            if isinstance(entry, dict):
                extra = {k: v for k, v in entry.items() if v not in (None, [], "", "main")
                         and k != "source"}
                if extra:
                    raise cannot_honour(f"artifacts.{'/'.join(sorted(extra))}",
                                        "only the main container's paths are collected")
                entry = entry.get("source", "")
            path = str(entry)
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"{path!r} must be an absolute path without '..'")
            paths.append(path)
        return paths

    def verifier_environment(self) -> EnvironmentSection:
        """The separate verifier's environment: [verifier.environment], else the task's."""
        if self.verifier.environment is not None:
            return EnvironmentSection.model_validate(self.verifier.environment)
        return self.environment

    def network_for(self, phase: Literal["agent", "verifier"]) -> Literal["public", "no-network", "allowlist"]:
        """Harbor's resolution: the phase's own network_mode if set, else its environment's
        (a separate verifier's [verifier.environment], when it names one)."""
        section = self.agent if phase == "agent" else self.verifier
        environment = self.environment
        if phase == "verifier" and "network_mode" in (self.verifier.environment or {}):
            environment = self.verifier_environment()
        mode = section.network_mode or environment.network_mode
        return "no-network" if mode in ("none", "no-network") else mode  # type: ignore[return-value]

    def allowed_hosts_for(self, phase: Literal["agent", "verifier"]) -> list[str]:
        """The allowlist of a phase under `allowlist`: its own when it set network_mode."""
        section = self.agent if phase == "agent" else self.verifier
        hosts = section.allowed_hosts if section.network_mode else self.environment.allowed_hosts
        return list(hosts or [])

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> TaskConfig:
        if self.network_for("verifier") == "allowlist" and self.network_for("agent") != "allowlist":
            raise cannot_honour("[verifier] network_mode = 'allowlist' after an agent phase that is "
                                "not allowlist", "the verifier's allowlist is enforced on the agent's "
                                "network; give the agent phase (or [environment]) an allowlist too")
        if self.steps is not None:
            if not self.steps:
                raise ValueError("steps: a multi-step task needs at least one [[steps]]")
            names = [step.name for step in self.steps]
            if len(set(names)) != len(names):
                raise ValueError(f"steps: step names must be unique ({', '.join(names)})")
        return self


def ignored_fields(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of the keys no model here defines (Harbor ignores them too), in
    document order; [metadata] is free-form by design and never listed."""
    found = []
    for key in model.model_extra or {}:
        found.append(prefix + key)
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, Metadata):
            continue
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if isinstance(item, BaseModel):
                where = f"{prefix}{name}" + (f"[{i}]" if isinstance(value, list) else "")
                found.extend(ignored_fields(item, where + "."))
    return found
