"""What an executor carries to where a trial runs: every option of the job that shapes a
trial, as one typed object. The local executor and a Ray node both make their
TrialContext with `TrialSpec.context()`, so an option added here reaches the trial on
both or on neither (the Ray payload once dropped the OCI runtime, running agents without
gVisor, and the CA bundle and the manifest's folder, silently).

What is bound to a place stays out: the runtime (each node's own engine), the job folder
(the driver's, or a node's scratch folder), the image cache, watchdog, network pool and
cancel event (per process), and the CA bundle's path (the bytes travel; each side writes
them where its containers can bind them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.models import Manifest, TrialResult
from orchestrator.services import Upstream
from orchestrator.trial import Published

if TYPE_CHECKING:
    from orchestrator.agents import Agent
    from orchestrator.host import DiskWatchdog, NetworkPool
    from orchestrator.models import Observers
    from orchestrator.runtime import Runtime
    from orchestrator.services import Upstreams
    from orchestrator.tasks import Task
    from orchestrator.trial import TaskImages, TrialContext


@dataclass
class Item:
    """One trial as the scheduler hands it to an executor: the task, the attempt, and the
    tries before this one."""

    task: Task
    attempt: int
    retries: list[str] = field(default_factory=list)
    outage_retries: int = 0  # of those, the ones an engine outage caused (free)


class TrialSpec(BaseModel):
    """Every job option a trial depends on (JSON-able but for the CA bundle's bytes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job: str
    manifest: Manifest  # given as its JSON (model_dump exclude_unset): the condition hash it ran with
    manifest_dir: str | None = None  # where the manifest's prompt paths are relative to
    policy: str = "memory-on"
    upstreams: dict[str, Upstream] = {}  # Upstreams.by_name: the endpoints the model proxies reach
    ca_bundle: bytes | None = None  # trusted by image builds and every container
    build_policy: str = "prefer-prebuilt"
    oci_runtime: str | None = None  # every container of the trial (gVisor: runsc)
    registry: str | None = None  # --registry: the driver pushed the images; nodes pull

    def context(self, *, runtime: Runtime, job_dir: Path, images_for: Callable[[Task], TaskImages], watchdog: DiskWatchdog,
                networks: NetworkPool, cancel: threading.Event, upstreams: Upstreams | None,
                ca_file: Path | None, agent: Agent | None = None,
                observers: Observers | None = None) -> TrialContext:
        """The trial's context on this side; `ca_file` holds `ca_bundle` here, `agent` is
        the orchestrator's agent when the caller made it already."""
        from orchestrator.agents import agent_for
        from orchestrator.trial import TrialContext, trust_for

        manifest = self.manifest
        lead = manifest.orchestrator
        manifest_dir = Path(self.manifest_dir) if self.manifest_dir else None
        return TrialContext(
            runtime=runtime, job=self.job, job_dir=job_dir, condition=manifest.condition,
            condition_hash=manifest.condition_hash(), agent_id=lead.id,
            agent=agent or agent_for(lead, manifest_dir, ca_file), policy=self.policy,
            images_for=images_for, cancel=cancel, watchdog=watchdog, networks=networks,
            manifest=manifest, upstreams=upstreams, observers=observers,
            timeout_override=manifest.trial_budget.timeout_seconds, oci_runtime=self.oci_runtime,
            manifest_dir=manifest_dir, trust=trust_for(ca_file))



class NodeRequest(BaseModel):
    """One trial as the Ray driver sends it to a node (executors/ray.py `run_on_node`): the
    job's spec and what is this trial's own. The task's folder travels beside it, as a tar
    in Ray's object store (put once per task).

    Wire form: this object, pickled by Ray; every field is plain data (str, int, bytes,
    lists, the manifest, the endpoints and the images, each typed), so no process-bound object (a
    runtime, a lock, an event) can ride along. The node validates it again on receipt
    (`received`), so a request of the wrong shape fails there, naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True, revalidate_instances="always")

    spec: TrialSpec
    task_name: str  # dataset/task, as the driver loaded it
    content_hash: str  # the task folder's: the node unpacks it once under this key
    attempt: int = Field(ge=0)
    retries: list[str] = []  # the tries before this one (failure modes)
    images: Published | None = None  # --registry: the images the driver built and pushed

    @classmethod
    def received(cls, wire: object) -> NodeRequest:
        """The request as it arrived on the node, validated (ValidationError otherwise)."""
        return cls.model_validate(wire)


class NodeReply(BaseModel):
    """What a node sends back for one trial: its result and its folder as a tar (the driver
    alone writes the job directory). Wire form: this object, pickled by Ray; the driver
    validates it on receipt (`received`), so a reply of the wrong shape is an error in
    orchestra, raised, never a silently wrong result."""

    model_config = ConfigDict(extra="forbid", frozen=True, revalidate_instances="always")

    result: TrialResult
    folder: str = Field(pattern=r"^[^/]+$")  # the trial folder's name under the job's trials/
    tar: bytes  # that folder, tarred (orchestrator.archive: extracted with safe_extract)

    @classmethod
    def received(cls, wire: object) -> NodeReply:
        """The reply as it arrived on the driver, validated (ValidationError otherwise)."""
        return cls.model_validate(wire)
