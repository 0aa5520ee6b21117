"""A job folder's config.json: what the job was asked to run, written before its first
trial. `orchestra run --resume` rebuilds the job from it (the same tasks, manifest, policy,
k and endpoints; a manifest that no longer gives the recorded condition hash is refused),
and `orchestra view` reads a running job's plan from it. Keys a later or earlier orchestra
wrote and this one does not know are kept (extra="allow")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.util import JsonObject


class JobSource(BaseModel):
    """How to rebuild the job (absolute paths, as the first run resolved them)."""

    model_config = ConfigDict(extra="allow")
    path: str | None = None  # the task folder or dataset
    layer: str | None = None  # --layer
    endpoints: list[str] = Field(default_factory=list)  # endpoint config files
    manifest_dir: str | None = None  # where the manifest's relative paths resolve


class TaskRef(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    path: str
    content_hash: str


class JobConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    job: str
    manifest: JsonObject  # only the keys the manifest set: read back, the same condition hash
    condition_hash: str = ""  # "" (hand-made folders): not checked on resume
    k: int | None = None  # None: each task's layer default
    n_concurrent: int = 4
    policy: str = "memory-on"
    source: JobSource = Field(default_factory=JobSource)
    trials: int | None = None  # trials planned (jobs before 2026-12-05 lack it)
    tasks: list[TaskRef] = Field(default_factory=list)
