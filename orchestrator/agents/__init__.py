"""Host-side agent adapters: what to copy into the sandbox and which command to run."""

from __future__ import annotations

import hashlib
from pathlib import Path

from orchestrator.agents.base import Agent
from orchestrator.agents.command import CommandAgent
from orchestrator.agents.installed import INSTALLED
from orchestrator.agents.nop import NopAgent
from orchestrator.agents.oracle import OracleAgent
from orchestrator.agents.reference import ReferenceAgent
from orchestrator.errors import InputError
from orchestrator.models.manifest import AGENT_NAMES, RosterMember


def agent_for(member: RosterMember, manifest_dir: Path | None = None,
              ca_bundle: Path | None = None) -> Agent:
    if member.agent in INSTALLED:
        if not member.endpoint:
            raise InputError(f"roster.{member.id}.endpoint: agent {member.agent} calls a model; name "
                             "an endpoint (`endpoint:` in the manifest, or -m ENDPOINT)")
        return INSTALLED[member.agent](member, ca_bundle)
    if member.agent == "reference":
        return ReferenceAgent(member, load_prompt(member, manifest_dir))
    if member.agent == "oracle":
        return OracleAgent()
    if member.agent == "nop":
        return NopAgent()
    if member.agent == "command":
        return CommandAgent(member.command or "")
    raise InputError(f"agent {member.agent!r}: unknown (use {', '.join(AGENT_NAMES)})")


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
