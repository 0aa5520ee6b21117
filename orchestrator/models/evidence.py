"""relay-evidence.json (schema_version 1): a relay trial's channel as the relay saw it,
exported by orchestra into the trial's artifacts after the agent's turn (replacing whatever
the agent left under that name), graded by the task's tests and shown by the viewer. No
secret appears in it: a key the agent posted is scrubbed before it is written."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvidenceTrial(BaseModel):
    run_id: str
    trial_id: str
    channel_id: str


class EvidenceIdentity(BaseModel):
    role: str
    pubkey: str


class DirectoryEntry(BaseModel):
    name: str
    role: str
    pubkey: str
    display_name: str | None = None


class RelayMessage(BaseModel):
    """A message as the relay holds it, serves it (GET /messages) and exports it."""

    id: str
    kind: str
    created_at: float
    pubkey: str
    author: str
    author_role: str
    content: str
    tags: list[list[str]] = Field(default_factory=list)
    channel_id: str
    reply_to_event_id: str | None = None
    mentioned_pubkeys: list[str] = Field(default_factory=list)


class RelayEvidence(BaseModel):
    model_config = ConfigDict(extra="allow")  # a later schema's keys are kept
    schema_version: int = 1
    trial: EvidenceTrial
    task_name: str
    task_event_id: str | None = None  # the instruction's message
    completion_message_id: str | None = None  # the lead's last reply to it
    identities: dict[str, EvidenceIdentity] = Field(default_factory=dict)  # name -> who
    directory: list[DirectoryEntry] = Field(default_factory=list)
    scripted_events: list[str] = Field(default_factory=list)  # messages the task scripted
    observed_channels: list[str] = Field(default_factory=list)
    message_count: int = 0
    truncated: bool = False  # more messages than were exported
    messages: list[RelayMessage] = Field(default_factory=list)
