"""Host-side agent adapters: what to copy into the sandbox and which command to run."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import public_face
from orchestrator.errors import InputError
from orchestrator.models import AGENT_NAMES, RosterMember

if TYPE_CHECKING:
    from orchestrator.agents.base import (
        EXIT_OUTCOMES,
        KILL_AFTER_SEC,
        Agent,
        AgentRun,
        Conversing,
        render_command,
        under_timeout,
    )
    from orchestrator.agents.install import ensure_installed
    from orchestrator.agents.installed import INSTALLED, AgentRow, listing

__all__ = [
    "BUILT_IN", "EXIT_OUTCOMES", "INSTALLED", "KILL_AFTER_SEC", "Agent", "AgentRow", "AgentRun",
    "Conversing", "agent_for", "ensure_installed", "listing", "load_prompt", "render_command",
    "under_timeout",
]
__getattr__, __dir__ = public_face(__name__, {
    "EXIT_OUTCOMES": "base",
    "KILL_AFTER_SEC": "base",
    "Agent": "base",
    "AgentRun": "base",
    "Conversing": "base",
    "render_command": "base",
    "under_timeout": "base",
    "ensure_installed": "install",
    "INSTALLED": "installed",
    "AgentRow": "installed",
    "listing": "installed",
})

BUILT_IN = ("oracle", "nop", "reference", "command")


def agent_for(member: RosterMember, manifest_dir: Path | None = None,
              ca_bundle: Path | None = None) -> Agent:
    """The adapter for a roster member; only its own module is imported (start-up: an
    oracle run never loads the installed CLIs' recipes and trajectory parsers)."""
    if member.agent not in AGENT_NAMES:
        raise InputError(f"agent {member.agent!r}: unknown (use {', '.join(AGENT_NAMES)})")
    if member.agent == "acp" or member.agent.startswith("acp-"):  # agents/acp.py
        from orchestrator.agents.acp import acp_agent

        return acp_agent(member, ca_bundle)
    if member.agent not in BUILT_IN:  # an installed agent CLI
        from orchestrator.agents.installed import INSTALLED

        if not member.endpoint:
            raise InputError(f"roster.{member.id}.endpoint: agent {member.agent} calls a model; name "
                             "an endpoint (`endpoint:` in the manifest, or -m ENDPOINT)")
        return INSTALLED[member.agent](member, ca_bundle)
    if member.agent == "reference":
        from orchestrator.agents.reference import ReferenceAgent

        return ReferenceAgent(member, load_prompt(member, manifest_dir))
    if member.agent == "oracle":
        from orchestrator.agents.oracle import OracleAgent

        return OracleAgent()
    if member.agent == "nop":
        from orchestrator.agents.nop import NopAgent

        return NopAgent()
    from orchestrator.agents.command import CommandAgent

    return CommandAgent(member.command or "")


def load_prompt(member: RosterMember, manifest_dir: Path | None) -> bytes | None:
    """The member's prompt file, re-hashed before use: a changed file is refused."""
    if member.prompt is None:
        return None
    path = (manifest_dir or Path.cwd()) / member.prompt.path
    if not path.is_file():
        raise InputError(f"roster.{member.id}.prompt.path: {path} not found")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != member.prompt.sha256.lower():
        raise InputError(f"roster.{member.id}.prompt.sha256: {path} hashes to {digest}, "
                         f"not {member.prompt.sha256}; refusing to run a changed prompt")
    return data
