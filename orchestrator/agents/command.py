"""command: any CLI agent already present in the task image, run as a shell command."""

from __future__ import annotations

from orchestrator.agents.base import Plain
from orchestrator.tasks import Task


class CommandAgent(Plain):
    name = "command"

    def __init__(self, command: str):
        self._command = command

    def files(self, task: Task) -> dict[str, bytes]:
        return {}

    def env(self, task: Task) -> dict[str, str]:
        return {}

    def command(self, task: Task) -> str | None:
        return self._command
