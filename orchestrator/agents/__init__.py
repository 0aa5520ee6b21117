"""Host-side agent adapters: what to copy into the sandbox and which command to run."""

from __future__ import annotations

from orchestrator.agents.base import Agent
from orchestrator.agents.command import CommandAgent
from orchestrator.agents.nop import NopAgent
from orchestrator.agents.oracle import OracleAgent
from orchestrator.errors import InputError
from orchestrator.models.manifest import RosterMember


def agent_for(member: RosterMember) -> Agent:
    if member.agent == "oracle":
        return OracleAgent()
    if member.agent == "nop":
        return NopAgent()
    if member.agent == "command":
        return CommandAgent(member.command or "")
    raise InputError(f"agent {member.agent!r}: not available yet (use oracle, nop or command)")
