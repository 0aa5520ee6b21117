"""Roster workers (DESIGN 3.2): every member that is not the orchestrator runs in its own
container on the trial network, with its own relay identity and its own model proxy, and
its agent runs beside the orchestrator's until the orchestrator's agent phase ends."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator import scrub
from orchestrator.agents import agent_for, render_command, under_timeout
from orchestrator.archive import safe_extract, tar_files
from orchestrator.host import DiskWatchdog
from orchestrator.log import get_logger
from orchestrator.models import WorkerRecord, flag_env
from orchestrator.paths import (
    AGENT_LOGS,
    AGENT_STACK,
    AGENT_STACK_SOURCE,
    ARTIFACTS,
    INSTRUCTION,
    LOGS,
    TrialDir,
)
from orchestrator.runtime import Runtime
from orchestrator.tasks import StateRoots, Task, file_seed_archive
from orchestrator.trial.sandbox import Sandbox, require_runtime

if TYPE_CHECKING:
    from orchestrator.services import ModelProxy, TrialRelay
    from orchestrator.trial.context import TrialContext

log = get_logger()
WORKER_LOG_CAP_BYTES = 8 * 1024 * 1024


@dataclass
class Worker:
    member: str
    name: str
    container: str
    exec_id: str | None = None
    proxy: ModelProxy | None = None
    started: float = field(default_factory=time.time)


def start_workers(ctx: TrialContext, task: Task, box: Sandbox, relay: TrialRelay | None,
                  image: str, deadline: float, flags: set[str]) -> list[Worker]:
    """Each worker gets what the orchestrator's agent gets: the task's quotas (disk through
    the watchdog), `[agent] user`, the policy flags, a fresh state root and TMPDIR."""
    assert box.network is not None
    workers: list[Worker] = []
    environment = task.config.environment
    user = task.config.agent.user
    for member in ctx.manifest.roster:
        if member.kind == "orchestrator" or member.agent == "nop":
            continue  # a nop worker is an identity in the directory and nothing more
        agent = agent_for(member, ctx.manifest_dir)
        for index in range(member.count):
            name = member.id if member.count == 1 else f"{member.id}-{index + 1}"
            roots = StateRoots.fresh()
            spec = box.container(
                "worker", environment, image=image, name=f"{box.name}-{name}",
                command=["sleep", "infinity"], network=box.network.name, workdir=box.workdir,
                env={**environment.env, **flag_env(member, flags), **roots.env(box.workdir),
                     "ORCHESTRA_AGENT_ID": name},
                drop_all_capabilities=environment.drop_all_capabilities,
                binds={str(AGENT_STACK_SOURCE): AGENT_STACK})
            container = ctx.runtime.create(spec)
            box.containers.append(container)
            ctx.watchdog.register(container, environment.storage_mb)
            ctx.runtime.start(container)
            require_runtime(ctx.runtime, box, container, f"worker:{name}")
            worker = Worker(member=member.id, name=name, container=container)
            workers.append(worker)
            files = {INSTRUCTION: task.instruction.encode(), **agent.files(task)}
            ctx.runtime.put_archive(container, "/", tar_files(
                {p.lstrip("/"): c for p, c in files.items()},
                dirs=[d.lstrip("/") for d in (LOGS, AGENT_LOGS, ARTIFACTS)]))
            ctx.runtime.put_archive(container, "/", file_seed_archive(roots, box.workdir, ()))
            if user:  # a non-root agent owns its workdir and logs, as the orchestrator does
                ctx.runtime.exec(container, ["chown", "-R", user, box.workdir, AGENT_LOGS,
                                             ARTIFACTS, roots.state_home, roots.tmpdir])
            secrets = relay.env_for(relay.store.by_name(name)) if relay is not None else {}
            if member.endpoint and ctx.upstreams is not None:
                from orchestrator.services import ModelProxy

                upstream = ctx.upstreams.by_name[member.endpoint]
                worker.proxy = ModelProxy.for_upstream(box.network.gateway, upstream, member.budget,
                                                       ctx.manifest.prices, deadline + 60)
                secrets.update({**upstream.env, **worker.proxy.env()})
                scrub.register(worker.proxy.token)
            command = agent.command(task)
            if command is None:
                continue
            command = render_command(command, box.workdir, deadline)
            timeout = max(1, int(deadline - time.time()))
            wrapped = (f"{under_timeout(f'sh -c {shlex.quote(command)}', timeout)} "
                       f">{AGENT_LOGS}/stdout.txt 2>{AGENT_LOGS}/stderr.txt")
            env = {**member.env, **agent.env(task), **secrets, "ORCHESTRA_DEADLINE": str(int(deadline))}
            worker.exec_id = ctx.runtime.spawn(container, ["sh", "-c", wrapped], env=env,
                                               workdir=box.workdir, user=user)
            log.info("worker.started", trial=box.trial_id[:12], worker=name, member=member.id)
    return workers


def stop_workers(runtime: Runtime, workers: list[Worker], paths: TrialDir,
                 watchdog: DiskWatchdog | None = None) -> list[WorkerRecord]:
    """Kill the workers (their turn ends with the orchestrator's), copy out their logs."""
    records = []
    for worker in workers:
        exit_code = runtime.spawned_exit_code(worker.exec_id) if worker.exec_id else None
        runtime.kill(worker.container)
        if watchdog is not None:
            watchdog.unregister(worker.container)
        stream = runtime.get_archive(worker.container, AGENT_LOGS)
        if stream is not None:
            try:
                safe_extract(stream, paths.root / "workers" / worker.name, strip_prefix="agent",
                             cap_bytes=WORKER_LOG_CAP_BYTES)
            finally:
                stream.close()
        record = WorkerRecord(member=worker.member, name=worker.name, exit_code=exit_code,
                              seconds=round(time.time() - worker.started, 3),
                              disk_limit=watchdog is not None and watchdog.tripped(worker.container))
        if worker.proxy is not None:
            worker.proxy.stop()
            record.model = worker.proxy.summary()
            scrub.unregister(worker.proxy.token)
        records.append(record)
    return records
