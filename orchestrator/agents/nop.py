"""nop: does nothing. Every grader should give it 0."""

from __future__ import annotations

from orchestrator.agents.base import Plain
from orchestrator.tasks import Task


class NopAgent(Plain):
    name = "nop"

    def files(self, task: Task) -> dict[str, bytes]:
        return {}

    def env(self, task: Task) -> dict[str, str]:
        return {}

    def command(self, task: Task) -> str | None:
        return None
