"""Inputs: Harbor task folders loaded into a Task (load), compose files, memory seed
sources, slug rules, base-image references and their stand-ins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.tasks.compose import (
        Compose,
        ComposeHealthcheck,
        HostEnv,
        Service,
        allow_host_env,
        allowed_host_env,
    )
    from orchestrator.tasks.defects import task_defects
    from orchestrator.tasks.dockerfile import (
        expand_args,
        for_classic_builder,
        global_args,
        joined_lines,
        read_dockerfile,
    )
    from orchestrator.tasks.inputs import search_file
    from orchestrator.tasks.load import (
        Task,
        find_task_dirs,
        hash_tree,
        image_repository,
        load_task,
        load_tasks,
        load_tasks_lenient,
    )
    from orchestrator.tasks.memory import FactFile, StateRoots, file_seed_archive, seed_engrams
    from orchestrator.tasks.slugs import MAX_VALUE_BYTES, SlugError, normalise
    from orchestrator.tasks.standins import RELEASES, StandIn, base_image, choose, parse_reference

__all__ = [
    "MAX_VALUE_BYTES", "RELEASES", "Compose", "ComposeHealthcheck", "FactFile", "HostEnv",
    "Service", "SlugError", "StandIn", "StateRoots", "Task", "allow_host_env", "allowed_host_env",
    "base_image", "choose", "expand_args", "file_seed_archive", "find_task_dirs", "for_classic_builder",
    "global_args", "hash_tree", "image_repository", "joined_lines", "load_task", "load_tasks",
    "load_tasks_lenient", "normalise", "parse_reference", "read_dockerfile", "search_file", "seed_engrams",
    "task_defects",
]
__getattr__, __dir__ = public_face(__name__, {
    "Compose": "compose",
    "ComposeHealthcheck": "compose",
    "HostEnv": "compose",
    "Service": "compose",
    "allow_host_env": "compose",
    "allowed_host_env": "compose",
    "task_defects": "defects",
    "expand_args": "dockerfile",
    "for_classic_builder": "dockerfile",
    "global_args": "dockerfile",
    "joined_lines": "dockerfile",
    "read_dockerfile": "dockerfile",
    "search_file": "inputs",
    "Task": "load",
    "find_task_dirs": "load",
    "hash_tree": "load",
    "image_repository": "load",
    "load_task": "load",
    "load_tasks": "load",
    "load_tasks_lenient": "load",
    "FactFile": "memory",
    "StateRoots": "memory",
    "file_seed_archive": "memory",
    "seed_engrams": "memory",
    "MAX_VALUE_BYTES": "slugs",
    "SlugError": "slugs",
    "normalise": "slugs",
    "RELEASES": "standins",
    "StandIn": "standins",
    "base_image": "standins",
    "choose": "standins",
    "parse_reference": "standins",
})
