"""acp: any agent that speaks the Agent Client Protocol over stdio (work in progress)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import InputError

if TYPE_CHECKING:
    from orchestrator.agents.base import Agent
    from orchestrator.models.manifest import RosterMember


def acp_agent(member: RosterMember, ca_bundle: Path | None = None) -> Agent:
    raise InputError(f"agent {member.agent}: the ACP client is not finished yet")
