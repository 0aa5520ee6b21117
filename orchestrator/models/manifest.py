"""The manifest: an agent lineup and the condition it defines (DESIGN 3.2)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from orchestrator.errors import InputError, validation_problems
from orchestrator.util import JsonObject

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs is Python 3.13's

# Built in, then the installed agent CLIs (orchestrator.agents.installed.INSTALLED).
AgentKind = Literal["oracle", "nop", "reference", "command", "acp", "acp-opencode", "acp-qwen-code",
                    "mini-swe-agent", "aider", "opencode", "claude-code", "codex", "gemini-cli",
                    "qwen-code", "openhands"]
AGENT_NAMES: tuple[str, ...] = get_args(AgentKind)


def is_agent_kind(name: str) -> TypeIs[AgentKind]:
    """Whether `name` is one of the agents orchestra runs (AGENT_NAMES)."""
    return name in AGENT_NAMES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Budget(_Strict):
    max_calls: int | None = Field(default=None, ge=0)
    tokens: int | None = Field(default=None, ge=0)
    cost: float | None = Field(default=None, ge=0)


class PromptRef(_Strict):
    path: str
    sha256: str


class AcpOptions(_Strict):
    """agent: acp: how orchestra's ACP client answers the agent. `permission`: allow (the
    allow_once option it offers, else allow_always) | allow_always | reject; `fs`: serve
    fs/read_text_file and fs/write_text_file in the container (as the agent's user) or
    decline them. The terminal capability is always declined."""

    permission: Literal["allow", "allow_always", "reject"] = "allow"
    fs: bool = True


class RosterMember(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    kind: Literal["orchestrator", "worker"] = "worker"
    role: str = ""
    count: int = Field(default=1, ge=1)
    agent: AgentKind = "nop"
    command: str | None = None  # agent: command: the run template
    install: str | None = None  # agent: command: a script baked into a cached image layer
    env: dict[str, str] = {}  # extra environment for this agent (no secrets: use endpoints)
    endpoint: str | None = None
    # Any JSON value the chat-completions API accepts (tool_choice objects, stop lists...).
    generation: dict[str, JsonValue] = {}
    budget: Budget = Budget()
    flags: dict[str, dict[str, str]] = {}
    prompt: PromptRef | None = None
    acp: AcpOptions = AcpOptions()  # agent: acp / acp-*: the client's answers


class TrialBudget(_Strict):
    timeout_seconds: float | None = Field(default=None, gt=0)


class SandboxPolicy(_Strict):
    """What every trial of a job run under this manifest must get (a suite that requires
    gVisor says so here): the job refuses to start, exit 2, on an engine that cannot."""

    oci_runtime: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    require: list[Literal["disk-quota", "host-isolation"]] = []
    # FROM bases the engine lacks: auto (pulled, else a stand-in when no registry answers) |
    # pull (a failed pull is the task's build_error) | offline (never pulled: stand-ins);
    # `orchestra run --bases` wins over it
    bases: Literal["auto", "pull", "offline"] | None = None
    # declared cpus: reserved for the whole trial (reserve) or the container's limit only
    # (cpu-limit; memory is reserved under both); `orchestra run --admission` wins over it
    admission: Literal["reserve", "cpu-limit"] | None = None
    # host variables a task may read (`${NAME}` in its compose file or verifier.env); nothing
    # by default, never orchestra's own (`orchestra run --task-env` adds to it)
    task_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = []


class Manifest(_Strict):
    schema_version: int = 1
    condition: str = "default"
    roster: list[RosterMember]
    trial_budget: TrialBudget = TrialBudget()
    sandbox: SandboxPolicy = SandboxPolicy()
    prices: dict[str, dict[str, float]] = {}
    metadata: JsonObject = {}

    @model_validator(mode="after")
    def _one_orchestrator(self) -> Manifest:
        leads = [m.id for m in self.roster if m.kind == "orchestrator"]
        if len(leads) != 1:
            raise ValueError(
                f"roster: exactly one member needs kind: orchestrator (found {len(leads)})"
            )
        ids = [m.id for m in self.roster]
        if len(set(ids)) != len(ids):
            raise ValueError("roster: member ids must be unique")
        return self

    @property
    def orchestrator(self) -> RosterMember:
        return next(m for m in self.roster if m.kind == "orchestrator")

    def condition_hash(self) -> str:
        """sha256 of canonical JSON (sorted keys, unset optionals left out)."""
        canonical = json.dumps(
            self.model_dump(mode="json", exclude_unset=True, exclude_none=True),
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    def with_endpoint(self, endpoint: str) -> Manifest:
        """The same lineup with the orchestrator on this endpoint (`--model`); an agent
        that calls no model (oracle, nop) becomes the reference agent."""
        roster = [
            m.model_copy(update={"endpoint": endpoint, "agent": "reference" if m.agent in (
                "oracle", "nop") else m.agent}) if m.kind == "orchestrator" else m
            for m in self.roster
        ]
        return self.model_copy(update={"roster": roster})

    def with_agent(self, agent: AgentKind) -> Manifest:
        """The same lineup with the orchestrator's agent replaced (`--agent`)."""
        roster = [
            m.model_copy(update={"agent": agent}) if m.kind == "orchestrator" else m
            for m in self.roster
        ]
        return self.model_copy(update={"roster": roster})


# How a policy flag reaches an agent that does not name it in its `flags` mapping.
DEFAULT_FLAGS: dict[str, dict[str, str]] = {"no_memory": {"ORCHESTRA_NO_MEMORY": "1"}}


def flag_env(member: RosterMember, active: set[str]) -> dict[str, str]:
    """The environment that tells `member` which policy flags are on."""
    env: dict[str, str] = {}
    for flag in sorted(active):
        mapping = member.flags.get(flag, DEFAULT_FLAGS.get(flag))
        if mapping is None:
            raise InputError(f"flag {flag!r}: roster member {member.id!r} has no `flags` entry "
                             "for it and orchestra knows no default")
        env.update(mapping)
    return env


def load_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise InputError(f"{path}: manifest not found")
    import yaml  # a run without a manifest file does not load it

    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InputError(f"{path}: a manifest is a YAML mapping with a roster")
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        raise InputError(validation_problems(path, exc)) from exc
    for member in manifest.roster:
        if member.agent in ("command", "acp") and not member.command:
            raise InputError(f"{path}: field 'roster.{member.id}.command': required for agent: {member.agent}")
        if member.agent.startswith("acp") and member.kind != "orchestrator":
            raise InputError(f"{path}: field 'roster.{member.id}.agent': {member.agent} runs as the "
                             "orchestrator only (no ACP client talks to workers yet)")
    return manifest


def default_manifest(agent: AgentKind) -> Manifest:
    return Manifest(condition=agent, roster=[RosterMember(id="lead", kind="orchestrator", agent=agent)])
