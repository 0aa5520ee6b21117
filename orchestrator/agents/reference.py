"""reference: the stdlib LLM agent of the agent stack (`orchestra-agent`), wired to the
model proxy. Generation settings come from the manifest; its budget is enforced by the
proxy, whose refusal the agent sees and stops on (exit 4, agent_outcome budget_exceeded)."""

from __future__ import annotations

import json

from orchestrator.agents.base import Plain
from orchestrator.models import RosterMember
from orchestrator.tasks import Task

PROMPT_PATH = "/opt/orchestra-prompt/system.md"


class ReferenceAgent(Plain):
    name = "reference"

    def __init__(self, member: RosterMember, prompt: bytes | None = None):
        self.member, self.prompt = member, prompt

    def files(self, task: Task) -> dict[str, bytes]:
        return {PROMPT_PATH: self.prompt} if self.prompt is not None else {}

    def env(self, task: Task) -> dict[str, str]:
        env = {"ORCHESTRA_GENERATION": json.dumps(self.member.generation, sort_keys=True)}
        if self.prompt is not None:
            env["ORCHESTRA_PROMPT_FILE"] = PROMPT_PATH
        return env

    def command(self, task: Task) -> str | None:
        return "orchestra-agent"
