"""Inputs: Harbor task folders loaded into a Task (load), compose files, memory seed
sources, slug rules, base-image references and their stand-ins."""

from orchestrator import public_face

__all__ = ["Task", "find_task_dirs", "hash_tree", "load_task", "load_tasks", "load_tasks_lenient"]
__getattr__, __dir__ = public_face(__name__, {
    "Task": "load",
    "load_task": "load",
    "load_tasks": "load",
    "load_tasks_lenient": "load",
    "find_task_dirs": "load",
    "hash_tree": "load",
})
