"""A task's compose sidecars (compose.py), started before the agent's container.

Each sidecar runs on the trial's network under its service name, with the task's cpus,
memory and pids quotas, the trial's labels, and is removed with the sandbox. Images: a
service's `image` is used when present, else pulled, else stood in as a task's FROM is
(images.resolve_bases); its `build` context is built once per content, bases and CA (tagged
orchestra/sidecar/<task>-<service>:<hash>...), through the task image's build path. `main` waits for each dependency's condition:
started, or healthy by the service's own Docker healthcheck.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from orchestrator.errors import LaunchError
from orchestrator.log import get_logger
from orchestrator.models import BaseImage
from orchestrator.paths import dockerfile_in
from orchestrator.runtime import (
    LABEL_IMAGE_KIND,
    BuildFailed,
    HealthProbe,
    Runtime,
    RuntimeFault,
    VolumeMount,
)
from orchestrator.tasks import (
    Compose,
    ComposeHealthcheck,
    Service,
    Task,
    hash_tree,
    image_repository,
    read_dockerfile,
)
from orchestrator.trial.bases import bases_suffix, build_on_bases, resolve_bases
from orchestrator.trial.images import build_once
from orchestrator.trial.trust import Trust

if TYPE_CHECKING:
    from orchestrator.trial.sandbox import Sandbox

log = get_logger()
START_WAIT_SEC = 60.0


class SidecarFailed(RuntimeFault):
    """A sidecar did not start or never became healthy: the trial cannot begin."""


def volume_mounts(compose: Compose, service: Service, prefix: str) -> list[VolumeMount]:
    return [VolumeMount(source=f"{prefix}-{v.split(':')[0]}", target=v.split(":", 1)[1].split(":")[0])
            for v in service.volumes]


def sidecar_image(runtime: Runtime, task: Task, name: str, service: Service, job: str = "",
                  trust: Trust | None = None) -> tuple[str, list[BaseImage]]:
    """A service's image, and what it was made from. `image`: the engine's, else pulled
    (once per job), else its stand-in where one is near enough and no registry answered
    (--bases as for the task's FROM). `build`: built once per content, its bases and the CA,
    through the task image's build path (images.build_on_bases)."""
    used_for = f"sidecar:{name}"
    if service.build is None:
        assert service.image is not None
        resolved = resolve_bases(runtime, f"FROM {service.image}\n", job, used_for)
        stand_in = resolved[0].stand_in if resolved else None
        return (stand_in.stand_in if stand_in else service.image), [r.record for r in resolved]
    if service.build.dockerfile != "Dockerfile":  # the engine reads the named file
        raise BuildFailed(f"services.{name}.build.dockerfile: only `Dockerfile` is supported")
    context = task.paths.environment / service.build.context
    text = read_dockerfile(dockerfile_in(context))  # capped, UTF-8 (checked at load)
    ca = trust.pem if trust is not None else None
    resolved = resolve_bases(runtime, text, job, used_for)
    tag = (f"{image_repository(task).replace('orchestra/task/', 'orchestra/sidecar/')}-{name}:"
           f"{hash_tree(context)[:32]}{bases_suffix(resolved, ca)}")
    build_once(runtime, tag, lambda: build_on_bases(
        runtime, context, text, resolved, tag,
        {LABEL_IMAGE_KIND: "sidecar-image", "orchestra.image.task": task.name},
        task.config.environment.build_timeout_sec, ca))
    return tag, [r.record for r in resolved]


class UnboundedVolume(LaunchError):
    """A named volume with nothing to bound it: every attempt would be the same (not retried)."""

    retryable = False


def start_sidecars(runtime: Runtime, task: Task, box: Sandbox, name: str) -> dict[str, str]:
    """Volumes, then every sidecar in dependency order; returns service -> container id."""
    from orchestrator.trial.sandbox import require_runtime  # sandbox starts sidecars: not at import
    compose = task.compose
    assert compose is not None and box.network is not None
    env = task.config.environment
    for volume in compose.volumes:
        box.named_volumes.append(_named_volume(runtime, box, f"{name}-{volume}", volume))
    started: dict[str, str] = {}
    for service_name in compose.start_order():
        service = compose.services[service_name]
        wait_for(runtime, compose, service, started)
        command = service.command
        image, _bases = sidecar_image(runtime, task, service_name, service, box.job, box.trust)
        spec = box.container(
            "sidecar", env, image=image, name=f"{name}-{service_name}",
            command=command if isinstance(command, list) or command is None else ["sh", "-c", command],
            network=box.network.name, workdir=service.working_dir, env=dict(service.environment),
            mounts=volume_mounts(compose, service, name), aliases=[service_name],
            healthcheck=_probe(service.healthcheck) if service.healthcheck else None,
            entrypoint=[service.entrypoint] if isinstance(service.entrypoint, str) else service.entrypoint)
        container = runtime.create(spec)
        box.containers.append(container)
        runtime.start(container)
        require_runtime(runtime, box, container, f"sidecar:{service_name}")
        started[service_name] = container
    return started


def _named_volume(runtime: Runtime, box: Sandbox, name: str, volume: str) -> str:
    """A compose named volume on the trial's own disk where it has one, so what any service
    writes there counts against storage_mb (an engine volume is the engine's disk: 301 MB
    were written past a 256 MB limit and graded 1.0). Without a loop disk the job's
    pre-flight refused the task (job/preflight.py unbounded_volumes); a trial that still gets
    here (a node whose engine has none) is refused, never given an unbounded volume."""
    if box.loop_disk is None:
        raise UnboundedVolume(f"compose volume {volume!r}: this trial has no loop disk to hold it to "
                              "storage_mb; refused rather than run unbounded")
    folder = box.loop_disk.mountpoint / f"volume-{volume}"  # the name is Docker's [A-Za-z0-9_.-]
    folder.mkdir(exist_ok=True)
    return runtime.create_bind_volume(name, str(folder), box.labels("volume"))


def wait_for(runtime: Runtime, compose: Compose, service: Service, started: dict[str, str]) -> None:
    """Block until each of `service`'s dependencies meets its condition."""
    for dep, rule in service.depends_on.items():
        container = started[dep]
        healthcheck = compose.services[dep].healthcheck
        limit = START_WAIT_SEC
        if healthcheck is not None:
            limit += _probe(healthcheck).longest_wait_sec
        deadline = time.monotonic() + limit
        while True:
            status, health = runtime.health(container)
            if status in ("exited", "dead"):
                raise SidecarFailed(f"compose service {dep!r} exited before the trial began")
            if rule.condition == "service_started" and status == "running":
                break
            if rule.condition == "service_healthy" and health == "healthy":
                break
            if rule.condition == "service_healthy" and health is None:
                raise SidecarFailed(f"compose service {dep!r}: service_healthy needs a healthcheck")
            if time.monotonic() > deadline:
                raise SidecarFailed(f"compose service {dep!r} was not {rule.condition.removeprefix('service_')} "
                                    f"within {limit:.0f} s (health: {health})")
            time.sleep(0.2)


def _probe(healthcheck: ComposeHealthcheck) -> HealthProbe:
    """A compose healthcheck in the runtime's terms."""
    return HealthProbe(test=healthcheck.command, interval_sec=healthcheck.seconds("interval"),
                       timeout_sec=healthcheck.seconds("timeout"), retries=healthcheck.retries,
                       start_period_sec=healthcheck.seconds("start_period"))
