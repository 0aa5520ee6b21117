"""A job's options (JobOptions: everything `orchestra run` decides about a job) and the
attempts per task they give."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.models import EndpointConfig, JobSource
from orchestrator.tasks import Task

LAYER_DEFAULT_K = {"regression": 1, "workflow": 3}


@dataclass
class JobOptions:
    job_name: str
    jobs_dir: Path
    n_concurrent: int = 4
    k: int | None = 1  # None: each task's layer default (regression 1, workflow 3, else 1)
    policy: str = "memory-on"
    manifest_dir: Path | None = None
    endpoints: EndpointConfig | None = None
    max_retries: int = 2
    backoff_multiplier: float = 1.0
    max_cpus: float | None = None  # default: what the engine reports
    max_memory_mb: int | None = None
    admission: str | None = None  # reserve | cpu-limit (scheduler.py); None: the manifest's sandbox.admission, else reserve
    build_workers: int | None = None  # --build-ahead: images built ahead of trials at once (job/buildpool.py); None: min(2, cpus); 0: none ahead
    resume: bool = False
    retry_errors: bool = False  # with resume: re-run infra, launch and build errors too
    ca_bundle: Path | None = None  # trusted in image builds (a TLS-intercepting proxy)
    build_policy: str = "prefer-prebuilt"  # docker_image: prefer-prebuilt | build | pull
    bases: str | None = None  # FROM bases the engine lacks: auto (pull, else stand in) | pull | offline; None: the manifest's sandbox.bases, else auto
    oci_runtime: str | None = None  # --oci-runtime, e.g. runsc
    registry: str | None = None  # --registry HOST/PREFIX: built images pushed, Ray nodes pull
    require: list[str] = field(default_factory=list)  # --require: capabilities (REQUIRABLE) or exit 2
    replay_from: Path | None = None  # answer model calls from this job's recorded exchanges
    image_budget_gb: float | None = None  # task images pruned LRU to this while the job runs
    budget_interval: float = 10.0  # seconds between the budget's looks at the disk
    longest_first: bool = True  # known durations (a baseline's, this host's record) order the trials
    durations: dict[str, float] | None = None  # task content hash -> seconds, from --baseline
    engine_wait: float = 300.0  # seconds trials wait for an engine that stopped answering
    backend: str = "local"  # local | ray
    ray_address: str | None = None
    source: JobSource = field(default_factory=JobSource)  # how to rebuild this job (for --resume)

def attempts_for(task: Task, k: int | None) -> int:
    return k if k is not None else LAYER_DEFAULT_K.get(task.config.metadata.evaluation_layer or "", 1)
