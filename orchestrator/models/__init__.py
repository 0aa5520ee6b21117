"""orchestra's data at its boundaries, one module each; pydantic models validate what is read
from or written to a file (a bad one fails naming the file and the field):

- task: task.toml (Harbor's task format, a superset of it)
- manifest: the agent lineup and the condition it defines
- endpoint: endpoint configs (where and how a model is called)
- prices: what a model's tokens cost (the default table, and which price wins)
- wiring: the variables orchestra sets in a container, which no dataset or endpoint may set
- result: trial and job results (result.json)
- failures: which FailureMode a trial ends in and which are retried (the one place)
- records: what a trial's phases and services record in its result, and the job's memory shadow
- jobconfig: a job folder's config.json (what --resume and the viewer read back)
- compare: `orchestra compare`'s paired comparison (compare*.json)
- evidence: relay-evidence.json (a relay trial's channel, graded by its tests)
- events: a job's lifecycle events for watchers (NamedTuples, not pydantic: in memory only)
- trajectory: an agent's trajectory.jsonl, read one way for every reader (plain functions)
- atif: the trajectory in Harbor's interchange format (agent/trajectory.atif.json)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.models.compare import ClassDelta, CompareReport, KStats
    from orchestrator.models.endpoint import EndpointConfig, default_endpoint_files, load_endpoints
    from orchestrator.models.events import (
        AdmissionWaiting,
        Observers,
        PhaseStarted,
        Planned,
        TrialFinished,
    )
    from orchestrator.models.evidence import (
        DirectoryEntry,
        EvidenceIdentity,
        EvidenceTrial,
        RelayEvidence,
        RelayMessage,
    )
    from orchestrator.models.failures import (
        AGENT_KILLED,
        JOB_CANCELLED,
        NOT_GRADED,
        RERUN_ON_RESUME,
        RETRIED,
        Failure,
        agent_ended,
        answer_leak,
        cancelled_in_phase,
        endpoint_failed,
        failure_of,
        infra_failure,
        is_host_disk_full,
        is_retried,
        rerun_on_resume,
        setup_failure,
        steps_outcome,
        verifier_ended,
        verifier_error,
        verifier_timeout,
    )
    from orchestrator.models.jobconfig import JobConfig, JobSource, TaskRef
    from orchestrator.models.manifest import (
        AGENT_NAMES,
        Budget,
        Manifest,
        RosterMember,
        default_manifest,
        flag_env,
        is_agent_kind,
        load_manifest,
    )
    from orchestrator.models.prices import DEFAULT_PRICES, PRICES_AS_OF, Prices, price_of
    from orchestrator.models.records import (
        ArmShadow,
        CollectedPath,
        EgressRecord,
        EngramSeeded,
        MemoryAudit,
        MemoryShadow,
        ModelUsage,
        ProxyCounts,
        RelayRecord,
        StandInRecord,
        WorkerRecord,
    )
    from orchestrator.models.result import (
        ERRORED,
        VOID,
        AppliedLimits,
        BaseImage,
        BuildFailure,
        EngineOutage,
        FailureMode,
        ImageBuild,
        JobCapabilities,
        JobResult,
        StepResult,
        TrialResult,
        TrialSummary,
        headline_of,
        pass_at_k,
        pass_hat_k,
        passes,
        trial_folder_name,
    )
    from orchestrator.models.task import (
        MAX_HEALTH_RETRIES,
        MAX_HEALTH_STEP_SEC,
        MAX_HEALTH_WAIT_SEC,
        Healthcheck,
        StepSection,
        TaskConfig,
        ignored_fields,
        name_problem,
    )
    from orchestrator.models.trajectory import event_of, tool_of
    from orchestrator.models.wiring import is_wiring, wiring_in

__all__ = [
    "AGENT_KILLED", "AGENT_NAMES", "AdmissionWaiting", "DEFAULT_PRICES", "PRICES_AS_OF", "Prices", "price_of", "AppliedLimits", "ArmShadow", "BaseImage",
    "Budget", "BuildFailure", "ClassDelta", "CollectedPath", "CompareReport", "DirectoryEntry",
    "ERRORED", "EgressRecord", "EndpointConfig", "EngineOutage", "EngramSeeded",
    "EvidenceIdentity", "EvidenceTrial", "Failure", "FailureMode", "Healthcheck", "ImageBuild",
    "JOB_CANCELLED", "JobCapabilities", "JobConfig", "JobResult", "JobSource", "KStats",
    "MAX_HEALTH_RETRIES", "MAX_HEALTH_STEP_SEC", "MAX_HEALTH_WAIT_SEC", "Manifest", "MemoryAudit",
    "MemoryShadow", "ModelUsage", "NOT_GRADED", "Observers", "PhaseStarted", "Planned", "ProxyCounts",
    "RERUN_ON_RESUME", "RETRIED", "RelayEvidence", "RelayMessage", "RelayRecord", "RosterMember",
    "StandInRecord", "StepResult", "StepSection", "TaskConfig", "TaskRef", "TrialFinished",
    "TrialResult", "TrialSummary", "VOID", "WorkerRecord", "agent_ended", "answer_leak",
    "cancelled_in_phase", "default_endpoint_files", "default_manifest", "endpoint_failed",
    "event_of", "failure_of", "flag_env", "headline_of", "ignored_fields", "infra_failure",
    "is_agent_kind", "is_host_disk_full", "is_retried", "is_wiring", "wiring_in", "load_endpoints",
    "load_manifest", "name_problem", "pass_at_k", "pass_hat_k", "passes", "rerun_on_resume",
    "setup_failure", "steps_outcome", "tool_of", "trial_folder_name", "verifier_ended",
    "verifier_error", "verifier_timeout",
]
__getattr__, __dir__ = public_face(__name__, {
    "ClassDelta": "compare",
    "CompareReport": "compare",
    "KStats": "compare",
    "EndpointConfig": "endpoint",
    "default_endpoint_files": "endpoint",
    "load_endpoints": "endpoint",
    "AdmissionWaiting": "events",
    "Observers": "events",
    "PhaseStarted": "events",
    "Planned": "events",
    "TrialFinished": "events",
    "DirectoryEntry": "evidence",
    "EvidenceIdentity": "evidence",
    "EvidenceTrial": "evidence",
    "RelayEvidence": "evidence",
    "RelayMessage": "evidence",
    "AGENT_KILLED": "failures",
    "JOB_CANCELLED": "failures",
    "NOT_GRADED": "failures",
    "RERUN_ON_RESUME": "failures",
    "RETRIED": "failures",
    "Failure": "failures",
    "agent_ended": "failures",
    "answer_leak": "failures",
    "cancelled_in_phase": "failures",
    "endpoint_failed": "failures",
    "failure_of": "failures",
    "infra_failure": "failures",
    "is_host_disk_full": "failures",
    "is_retried": "failures",
    "rerun_on_resume": "failures",
    "setup_failure": "failures",
    "steps_outcome": "failures",
    "verifier_ended": "failures",
    "verifier_error": "failures",
    "verifier_timeout": "failures",
    "JobConfig": "jobconfig",
    "JobSource": "jobconfig",
    "TaskRef": "jobconfig",
    "AGENT_NAMES": "manifest",
    "Budget": "manifest",
    "Manifest": "manifest",
    "RosterMember": "manifest",
    "default_manifest": "manifest",
    "flag_env": "manifest",
    "is_agent_kind": "manifest",
    "load_manifest": "manifest",
    "DEFAULT_PRICES": "prices",
    "PRICES_AS_OF": "prices",
    "Prices": "prices",
    "price_of": "prices",
    "ArmShadow": "records",
    "CollectedPath": "records",
    "EgressRecord": "records",
    "EngramSeeded": "records",
    "MemoryAudit": "records",
    "MemoryShadow": "records",
    "ModelUsage": "records",
    "ProxyCounts": "records",
    "RelayRecord": "records",
    "StandInRecord": "records",
    "WorkerRecord": "records",
    "AppliedLimits": "result",
    "BaseImage": "result",
    "BuildFailure": "result",
    "ERRORED": "result",
    "EngineOutage": "result",
    "FailureMode": "result",
    "ImageBuild": "result",
    "JobCapabilities": "result",
    "JobResult": "result",
    "StepResult": "result",
    "TrialResult": "result",
    "TrialSummary": "result",
    "VOID": "result",
    "headline_of": "result",
    "pass_at_k": "result",
    "pass_hat_k": "result",
    "passes": "result",
    "trial_folder_name": "result",
    "Healthcheck": "task",
    "MAX_HEALTH_RETRIES": "task",
    "MAX_HEALTH_STEP_SEC": "task",
    "MAX_HEALTH_WAIT_SEC": "task",
    "StepSection": "task",
    "TaskConfig": "task",
    "ignored_fields": "task",
    "name_problem": "task",
    "event_of": "trajectory",
    "tool_of": "trajectory",
    "is_wiring": "wiring",
    "wiring_in": "wiring",
})
