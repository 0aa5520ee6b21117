"""What a task needs that this host may lack, found before anything is spent
(`orchestra tasks check`): images the engine does not have (and whether the offline base
stands in), more cpus or memory than the engine has, and the network at build or grading
time (a RUN or test.sh line that fetches: apt, pip, uv, curl, wget, npm, git clone)."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.paths import verifier_dockerfile
from orchestrator.runtime import BuildFailed, EngineFacts, Runtime
from orchestrator.tasks import Task, read_dockerfile, search_file
from orchestrator.trial import base_references, stand_in_for

FETCHES = re.compile(r"\b(apt-get|apt|pip3?|uvx?|curl|wget|npm|npx|git\s+clone|go\s+install|cargo\s+install)\b")


def _image_needs(runtime: Runtime, what: str, dockerfile: str) -> list[str]:
    needs = []
    for ref in base_references(dockerfile):
        try:
            stand_in = stand_in_for(runtime, ref)
        except BuildFailed:
            needs.append(f"{what}: FROM {ref} is not on this engine and no offline base stands in "
                         "(pulled at run time: needs a registry that has it, or `docker load` of the image)")
            continue
        if stand_in is not None:
            needs.append(f"{what}: FROM {ref} is not on this engine: pulled at run time; where no "
                         f"registry answers (or --bases offline), {stand_in.stand_in} stands in: "
                         f"{stand_in.reason}" + (f". Warning: {stand_in.warning}" if stand_in.warning else ""))
    return needs


def _fetching(text: str) -> str | None:
    found = FETCHES.search(text)
    return found.group(1) if found else None


def _script_fetching(path: Path) -> str | None:
    """The first fetching tool a script names, read a chunk at a time (tasks.search_file)."""
    found = search_file(path, FETCHES)
    return found.group(1) if found else None


def host_needs(task: Task, runtime: Runtime | None, info: EngineFacts | None) -> list[str]:
    needs: list[str] = []
    env = task.config.environment
    dockerfile_path = task.paths.dockerfile
    dockerfile = read_dockerfile(dockerfile_path) if dockerfile_path.is_file() else ""
    if runtime is not None:
        if env.docker_image and not runtime.image_exists(env.docker_image):
            needs.append(f"image {env.docker_image}: not on this engine; pulled if a registry answers"
                         + (", else built from environment/Dockerfile" if dockerfile else " (no Dockerfile to fall back on)"))
        if dockerfile and not (env.docker_image and runtime.image_exists(env.docker_image)):
            needs += _image_needs(runtime, "environment/Dockerfile", dockerfile)
        tests_dockerfile = verifier_dockerfile(task.paths.tests)
        if task.config.verifier.environment_mode == "separate" and tests_dockerfile.is_file():
            needs += _image_needs(runtime, "tests/Dockerfile", read_dockerfile(tests_dockerfile))
        for name, service in (task.compose.sidecars if task.compose else {}).items():
            if service.image and not runtime.image_exists(service.image):
                needs.append(f"compose service {name}: image {service.image} is not on this engine "
                             "(needs a registry)")
    if info:
        cpus, memory_mb = info.cpus, info.memory_mb
        if cpus and env.cpus > cpus:
            needs.append(f"cpus = {env.cpus:g}, the engine has {cpus:g}: infeasible here")
        if memory_mb and env.memory_mb > memory_mb:
            needs.append(f"memory_mb = {env.memory_mb}, the engine has {memory_mb}: infeasible here")
    runs = "\n".join(line for line in dockerfile.splitlines() if line.strip().upper().startswith("RUN"))
    if tool := _fetching(runs):
        needs.append(f"the network at build time (a RUN line uses {tool})")
    tool = next(filter(None, (_script_fetching(p) for d in task.tests_dirs for p in sorted(d.glob("*.sh"))
                              if p.is_file())), None)
    if tool and task.config.network_for("verifier") != "no-network":
        needs.append(f"the network at grading time (test.sh uses {tool}; verifier network "
                     f"{task.config.network_for('verifier')})")
    return needs
