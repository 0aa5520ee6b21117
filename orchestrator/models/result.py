"""Trial and job results (DESIGN 3.7). Written once, atomically."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from orchestrator.models.records import (
    CollectedPath,
    EgressRecord,
    MemoryAudit,
    MemoryShadow,
    ModelUsage,
    Recorded,
    RelayRecord,
    StandInRecord,
    WorkerRecord,
)


class FailureMode(StrEnum):
    NONE = "none"
    AGENT_TIMEOUT = "agent_timeout"
    VERIFIER_TIMEOUT = "verifier_timeout"
    OOM = "oom"
    DISK_LIMIT = "disk_limit"
    LAUNCH_ERROR = "launch_error"
    BUILD_ERROR = "build_error"
    VERIFIER_ERROR = "verifier_error"
    ANSWER_LEAK = "answer_leak"
    INFEASIBLE = "infeasible"  # declared cpus/memory can never fit this host: not run
    CANCELLED = "cancelled"
    INFRA_ERROR = "infra_error"
    ENDPOINT_ERROR = "endpoint_error"  # the model endpoint was down (or too slow) after retries


# Failures of the machinery, not of the agent: the reward is missing and counts 0.
ERRORED = {
    FailureMode.LAUNCH_ERROR,
    FailureMode.BUILD_ERROR,
    FailureMode.VERIFIER_ERROR,
    FailureMode.VERIFIER_TIMEOUT,
    FailureMode.CANCELLED,
    FailureMode.INFRA_ERROR,
    FailureMode.ENDPOINT_ERROR,
    FailureMode.INFEASIBLE,
}


# Trials voided by the audit (DESIGN 2 step 9): they count as failed in every aggregate and
# gate, are listed as void, and are left out of paired statistics.
VOID = {FailureMode.ANSWER_LEAK}


class AppliedLimits(BaseModel):
    """What `docker inspect` says the agent container actually got."""

    nano_cpus: int | None = None
    memory_bytes: int | None = None
    memswap_bytes: int | None = None
    pids_limit: int | None = None  # processes the container may have (gVisor: RLIMIT_NPROC in its kernel)
    host_pids_limit: int | None = None  # the host cgroup's pids.max (gVisor: a backstop for its threads)
    cap_drop: list[str] = []
    cap_add: list[str] = []
    security_opt: list[str] = []
    init: bool | None = None
    network: str | None = None
    network_internal: bool | None = None
    host_isolation: str | None = None  # iptables (only its gateway's opened ports) | none
    host_ports: list[int] | None = None  # those ports, read back from the firewall
    storage_mb: int | None = None
    storage_enforcement: str | None = None  # storage_opt | loop-volume+watchdog | watchdog
    log_max_size: str | None = None
    oci_runtime: str | None = None  # the OCI runtime the engine says the container runs under


class PhaseTimings(BaseModel):
    build: float = 0.0
    start: float = 0.0
    seed: float = 0.0
    agent: float = 0.0
    collect: float = 0.0
    verify: float = 0.0
    cleanup: float = 0.0


class StepResult(BaseModel):
    """One of Harbor's [[steps]] within a trial."""

    name: str
    reward: dict[str, float] | None = None
    failure_mode: FailureMode = FailureMode.NONE
    error: str | None = None
    agent_exit_code: int | None = None
    seconds: float = 0.0
    stopped: str | None = None  # why the remaining steps did not run (min_reward)


PASS_REWARD = 1.0  # a headline reward that reaches this is a pass


def trial_folder_name(task: str, trial_id: str) -> str:
    """A trial's folder under the job's trials/: the task's last name part and the trial id's
    first 12 hex digits (unique in a job; the glob `*__ID12` finds it)."""
    return f"{task.split('/')[-1]}__{trial_id[:12]}"


def passes(reward: float | None) -> bool:
    """Whether a headline reward is a pass (no reward is not)."""
    return (reward or 0.0) >= PASS_REWARD


def pass_at_k(attempts: Iterable[Sequence[bool]]) -> float:
    """pass@k: the share of tasks with at least one passing attempt (0 with no task)."""
    tasks = list(attempts)
    return sum(any(a) for a in tasks) / len(tasks) if tasks else 0.0


def pass_hat_k(attempts: Iterable[Sequence[bool]]) -> float:
    """pass^k: the share of tasks whose every attempt passed (0 with no task)."""
    tasks = list(attempts)
    return sum(all(a) for a in tasks) / len(tasks) if tasks else 0.0


def headline_of(reward: dict[str, float]) -> float:
    """One number for a reward map, as Harbor's tools take it: `reward` when present, else
    the only value (Harbor's CLI and pass@k). Harbor has none for several keys without
    `reward` (its Mean metric reports each key's mean, as `orchestra report` does too);
    orchestra's is their mean, so a trial passes only when every key is 1."""
    if "reward" in reward:
        return float(reward["reward"])
    if not reward:
        return 0.0
    return float(sum(reward.values()) / len(reward))


BaseSource = Literal["local", "pulled", "stand-in", "orchestra", "failed"]


class BaseImage(BaseModel):
    """One FROM reference of a build the trial used (task image, tests/Dockerfile, a compose
    service's build), and where its image came from (DESIGN 5)."""

    reference: str  # as the Dockerfile names it
    used_for: str = "task"  # task | verifier | sidecar:<service>
    # local: the engine had it; pulled: from its registry now; stand-in: orchestra's base in its
    # place; orchestra: orchestra/base named; failed: not had (the build failed for it)
    source: BaseSource
    digest: str | None = None  # the registry's manifest digest (sha256:...) of what was used
    image_id: str | None = None  # the local image id the build started from
    stand_in: str | None = None  # orchestra/base:<release>, when one stood in
    python: str | None = None  # the stand-in's python
    reason: str | None = None  # why a stand-in: the pull's error, or --bases offline
    warning: str | None = None  # a digest pin the stand-in does not honour
    pull_error: str | None = None  # the failed pull's error (a stand-in's, or a build error's)


class BuildFailure(BaseModel):
    """A build that failed: which FROM reference, on what (a stand-in, or nothing: the pull
    that failed), and the build's own error."""

    reference: str | None = None  # the FROM reference the build started from (the first that stood in or failed)
    stand_in: str | None = None  # what the build ran on in its place, if anything
    pull_error: str | None = None  # the pull that failed, when that was the reference's fate
    message: str


class TrialResult(BaseModel):
    trial_id: str
    job: str
    task: str
    task_path: str
    content_hash: str
    condition: str
    condition_hash: str
    agent: str
    policy: str = "memory-on"
    scenario_class: str | None = None
    layer: str | None = None
    attempt: int
    reward: dict[str, float] | None = None
    voided_reward: dict[str, float] | None = None  # what the verifier gave a voided trial
    failure_mode: FailureMode = FailureMode.NONE
    error: str | None = None
    agent_exit_code: int | None = None
    verifier_exit_code: int | None = None
    verifier_mode: str = "shared"
    image: str | None = None
    image_source: str | None = None  # prebuilt | pulled | built
    image_pulled_from: list[str] = []  # a Ray node's images from --registry (not built there)
    healthchecks: int | None = None  # [environment] healthcheck runs before the agent
    base_alias: dict[str, str] = {}  # FROM reference -> the offline base that stood in
    stand_ins: list[StandInRecord] = []  # FROM references built on an offline base instead
    bases: list[BaseImage] = []  # every FROM reference built on: local, pulled (its digest) or stood in, and why
    build_failure: BuildFailure | None = None  # build_error: the reference, the stand-in or the failed pull
    limits: AppliedLimits = AppliedLimits()
    verifier_limits: AppliedLimits | None = None  # the verifier container's, read back
    # every container of the trial -> the OCI runtime it ran under, read back from the engine:
    # agent, verifier (separate/snapshot), worker:NAME, sidecar:SERVICE ("default": the engine's)
    container_runtimes: dict[str, str] = {}
    # shared mode grades in the agent's own environment: the agent could influence grading
    verifier_forgeable: bool = False
    verifier_note: str | None = None
    verifier_interpreter: str | None = None  # what ran test.sh (verifier_tools)
    verifier_image: str | None = None  # separate mode: "tests/Dockerfile" or "task image"
    egress: EgressRecord | None = None  # under an allowlist: the hosts, what went through, what was refused
    compose_services: list[str] = []  # sidecars from environment/docker-compose.yaml
    ignored_fields: list[str] = []  # task.toml keys Harbor and orchestra ignore (DESIGN 3.1)
    # host variables the dataset asked for and was not given (not in --task-env), and its
    # settings of orchestra's wiring variables that were dropped (DESIGN 4)
    host_env_notes: list[str] = []
    schema_version: str | None = None  # the task's schema_version (or legacy version), as written
    timings: PhaseTimings = PhaseTimings()
    tokens: int = 0
    cost: float = 0.0
    model: Recorded[ModelUsage] = None  # the proxy's counts (None, written {}: no proxy)
    agent_outcome: str | None = None  # ok | timeout | budget_exceeded | endpoint_error | step_limit | crashed
    memory: MemoryAudit = MemoryAudit()  # what was seeded, and the trajectory audit
    relay: Recorded[RelayRecord] = None  # a relay trial's relay (None, written {}: none)
    collected: dict[str, CollectedPath] = {}  # per copied-out path
    scrubbed_files: list[str] = []  # trial files in which a secret was found and replaced
    node: str | None = None  # the Ray node that ran it (backend ray)
    workers: list[WorkerRecord] = []  # roster workers
    retries: list[str] = []
    not_retried: str | None = None  # why an infra or launch error was final (a retry could not help)
    steps: list[StepResult] = []  # multi-step tasks: per-step rewards, in order
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def tokens_estimated(self) -> bool:
        """Some calls' usage was not reported by the upstream: their tokens are estimated."""
        return self.model is not None and self.model.tokens_estimated

    @property
    def cost_known(self) -> bool:
        """False when some call's dollars are unknown (no usage, or no price): `cost` is then
        only what the priced, counted calls cost, and reports say so."""
        return self.model is None or self.model.cost_known

    @property
    def headline(self) -> float:
        """The reward that counts: 0 for errored and voided trials (headline_of otherwise)."""
        if self.reward is None or self.failure_mode in VOID:
            return 0.0
        return headline_of(self.reward)


class TrialSummary(BaseModel):
    trial_id: str
    task: str
    attempt: int
    reward: float | None
    failure_mode: FailureMode
    scenario_class: str | None = None
    layer: str | None = None
    content_hash: str | None = None  # the task's content: compare pairs only equal ones
    recall_events: int = 0
    injected_chars: int = 0
    hits: int = 0
    suppressed: int = 0
    markers: int = 0  # point-of-use markers the task declares
    marker_used: bool = False  # one reached a tool argument or the answer after a recall
    shadow_events: int = 0
    shadow_agree: int = 0
    audit_complete: bool = True
    retries: int = 0
    node: str | None = None

    @property
    def headline(self) -> float:
        """The reward that counts, as TrialResult.headline: 0 for errored and void trials."""
        return self.reward if self.reward is not None else 0.0


class JobCapabilities(BaseModel):
    """What the runtime declared it could enforce for this job (runtime.base.Capabilities)."""

    disk_quota: str  # loop-volume | watchdog
    host_isolation: str  # iptables | none
    oci_runtimes: list[str] = []
    local_engine: bool = True
    registry_push: bool = True
    why: dict[str, str] = {}  # per capability not held: the reason
    # the optional runtime parts the engine had (runtime.base.Part values, sorted); None: a
    # result written before they were recorded
    parts: list[str] | None = None

    @field_validator("parts", mode="before")
    @classmethod
    def _sorted(cls, parts: object) -> object:
        """Capabilities.parts is a set: recorded in one order, so results compare and diff."""
        return sorted(str(p) for p in parts) if isinstance(parts, (set, frozenset, list, tuple)) else parts


class EngineOutage(BaseModel):
    """A time the engine did not answer (enginewatch): from the first probe that failed to
    the first that answered."""

    gone_at: float
    seconds: float


class ImageBuild(BaseModel):
    """One task's images built ahead of its trials by the job's build pool."""

    task: str
    started_at: float
    finished_at: float
    estimate: float = 0.0  # the planner's guess that ordered it (longest first)
    built: int = 0  # images this build made (0: all were there)
    shared_steps: int = 0  # its RUN steps an earlier build of the job had made (waited for, not run twice)
    error: str | None = None  # the build failure every trial of the task records


class JobResult(BaseModel):
    job: str
    condition: str
    condition_hash: str
    agent: str
    policy: str
    k: int
    n_trials: int
    counts: dict[str, int] = Field(default_factory=dict)  # by failure mode
    mean_reward: float = 0.0
    errored: list[str] = []
    void: list[str] = []  # trial ids voided by the audit (answer leak): counted as failed
    pass_at_k: float | None = None
    pass_hat_k: float | None = None
    images_built: int = 0
    images_pushed: int = 0  # to --registry
    images_pruned: int = 0  # by --image-budget-gb while the job ran
    capabilities: JobCapabilities | None = None  # what the engine could enforce (pre-flight)
    peak_cpus: float | None = None  # declared cpus of trials running at once (past the host's under cpu-limit)
    peak_memory_mb: int | None = None
    admission: Literal["reserve", "cpu-limit"] = "reserve"  # the job's admission policy (--admission)
    builds: list[ImageBuild] = []  # images built ahead of trials (job/buildpool.py), in start order
    retried: int = 0
    order: str = "given"  # how trials were ordered: given, or longest first (job/durations.py)
    engine_outages: list[EngineOutage] = []  # the engine gone and back while the job ran
    engine_down_seconds: float = 0.0  # their total
    started_at: float = 0.0
    finished_at: float = 0.0
    memory_shadow: MemoryShadow | None = None  # job/shadow.py's, when memory was in play
    trials: list[TrialSummary] = []
