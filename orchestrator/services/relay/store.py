"""The relay's state: identities, channels, messages and engrams, in memory.

Engrams are last-writer-wins per (owner, slug): write time max(now, head + 1), the newest
event wins, ties go to the lowest event id; `rm` writes a tombstone. An identity only ever
sees its own engrams.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass

from orchestrator.models import (
    DirectoryEntry,
    EvidenceIdentity,
    EvidenceTrial,
    RelayEvidence,
    RelayMessage,
)
from orchestrator.services.relay import auth
from orchestrator.tasks import MAX_VALUE_BYTES, normalise
from orchestrator.util import JsonObject

EXPORT_LIMIT = 1000
# Per-trial bounds (DESIGN 3.5): past one, the agent gets a clear HTTP error it can read.
MAX_MESSAGES = 5000
MAX_ENGRAM_EVENTS = 10000
MAX_STORED_BYTES = 32 * 1024 * 1024  # message contents and engram values together
MAX_LIST = 1000  # engrams returned by one `mem ls`


class RelayError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Identity:
    name: str
    role: str
    private_key: str
    display_name: str = ""

    @property
    def pubkey(self) -> str:
        return auth.pubkey_of(self.private_key)


Message = RelayMessage  # one model for the relay's wire, its store and the evidence


@dataclass
class EngramEvent:
    id: str
    owner: str  # pubkey
    slug: str
    value: str | None  # None: tombstone
    created_at: int
    client: str


def _event_id(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def value_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class RelayStore:
    def __init__(self, channel_id: str):
        self.channel_id = channel_id
        self.identities: dict[str, Identity] = {}  # by pubkey
        self.messages: list[Message] = []
        self.engrams: list[EngramEvent] = []
        self._message_ids: set[str] = set()
        # The newest event per (owner, slug) is always the winner (write time is
        # max(now, head + 1)), so heads are kept as they are written: reads are O(result).
        self._heads: dict[str, dict[str, EngramEvent]] = {}  # owner -> slug -> head event
        self._bytes = 0
        self._lock = threading.Lock()
        self._counter = 0

    def usage(self) -> tuple[int, int, int]:
        """Messages, engram events and bytes stored so far."""
        with self._lock:
            return len(self.messages), len(self.engrams), self._bytes

    def _charge(self, size: int, what: str) -> None:
        """Called under the lock before storing `size` more bytes."""
        if self._bytes + size > MAX_STORED_BYTES:
            raise RelayError(507, f"relay storage limit: {MAX_STORED_BYTES} bytes per trial "
                                  f"reached; {what} not stored")
        self._bytes += size

    # ---- identities -----------------------------------------------------------------
    def add_identity(self, name: str, role: str, display_name: str = "") -> Identity:
        identity = Identity(name=name, role=role, private_key=auth.new_private_key(),
                            display_name=display_name or name)
        self.identities[identity.pubkey] = identity
        return identity

    def by_name(self, name: str) -> Identity:
        for identity in self.identities.values():
            if identity.name == name:
                return identity
        raise KeyError(name)

    def directory(self) -> list[JsonObject]:
        return [{"name": i.name, "role": i.role, "pubkey": i.pubkey,
                 "display_name": i.display_name} for i in self.identities.values()]

    # ---- messages -------------------------------------------------------------------
    def post(self, author: Identity, content: object, reply_to: str | None = None,
             mentions: list[str] | None = None, channel_id: str | None = None) -> Message:
        channel = channel_id or self.channel_id
        if channel != self.channel_id:
            raise RelayError(403, f"channel {channel}: not a channel of this identity")
        if not isinstance(content, str) or not content:
            raise RelayError(400, "content: a non-empty string is required")
        if len(content.encode()) > MAX_VALUE_BYTES:
            raise RelayError(413, f"content: longer than {MAX_VALUE_BYTES} bytes")
        mentions = list(dict.fromkeys(mentions or []))
        unknown = [m for m in mentions if m not in self.identities]
        if unknown:
            raise RelayError(400, f"mentions: unknown pubkey(s) {', '.join(u[:12] for u in unknown)}")
        with self._lock:
            if reply_to is not None and reply_to not in self._message_ids:
                raise RelayError(404, f"reply_to: no message {reply_to} in this channel")
            if len(self.messages) >= MAX_MESSAGES:
                raise RelayError(429, f"relay message limit: {MAX_MESSAGES} messages per trial "
                                      "reached; nothing more can be posted")
            self._charge(len(content.encode()), "message")
            self._counter += 1
            created = time.time()
            message = Message(
                id=_event_id("msg", channel, author.pubkey, content, reply_to, created, self._counter),
                kind="message", created_at=created, pubkey=author.pubkey, author=author.name,
                author_role=author.role, content=content, channel_id=channel,
                reply_to_event_id=reply_to, mentioned_pubkeys=mentions,
                tags=[["e", reply_to, "reply"]] if reply_to else [],
            )
            message.tags += [["p", m] for m in mentions]
            self.messages.append(message)
            self._message_ids.add(message.id)
        return message

    def read(self, limit: int = 200) -> list[Message]:
        with self._lock:
            return list(self.messages[-limit:])

    # ---- engrams --------------------------------------------------------------------
    def engram(self, owner: Identity, raw_slug: str) -> EngramEvent | None:
        slug = normalise(raw_slug)
        with self._lock:
            winner = self._heads.get(owner.pubkey, {}).get(slug)
        return winner if winner is not None and winner.value is not None else None

    def list_engrams(self, owner: Identity, limit: int = MAX_LIST) -> list[EngramEvent]:
        """The live engrams of one owner, by slug, at most `limit` (O(owner's slugs))."""
        with self._lock:
            heads = list(self._heads.get(owner.pubkey, {}).values())
        live = sorted((h for h in heads if h.value is not None), key=lambda e: e.slug)
        return live[:limit]

    def write_engram(self, owner: Identity, raw_slug: str, value: str | None,
                     base_hash: str | None = None, client: str = "") -> EngramEvent:
        slug = normalise(raw_slug)
        if value is not None and len(value.encode()) > MAX_VALUE_BYTES:
            raise RelayError(413, f"value: longer than {MAX_VALUE_BYTES} bytes")
        with self._lock:
            head = self._heads.get(owner.pubkey, {}).get(slug)
            current = head.value if head is not None else None
            if base_hash is not None:
                if current is None or value_hash(current) != base_hash:
                    raise RelayError(409, f"{slug}: base hash does not match the current value")
            if value is None and current is None:
                raise RelayError(404, f"{slug}: no such engram")
            if value is not None and value == current:
                raise RelayError(409, f"{slug}: conflict: the engram already holds this value")
            if len(self.engrams) >= MAX_ENGRAM_EVENTS:
                raise RelayError(429, f"relay engram limit: {MAX_ENGRAM_EVENTS} writes per "
                                      "trial reached; nothing more can be written")
            self._charge(len((value or "").encode()), "engram")
            created = max(int(time.time()), head.created_at + 1 if head is not None else 0)
            event = EngramEvent(id=_event_id("engram", owner.pubkey, slug, value, created),
                                owner=owner.pubkey, slug=slug, value=value, created_at=created,
                                client=client)
            self._admit(event)
        return event

    def import_events(self, events: list[EngramEvent]) -> None:
        """Engram events made elsewhere (a restore, a merge), under the same winner rule."""
        with self._lock:
            for event in events:
                self._admit(event)

    def _admit(self, event: EngramEvent) -> None:
        """Store an event (under the lock); it becomes the head if it wins: newest write,
        ties to the lowest event id."""
        self.engrams.append(event)
        heads = self._heads.setdefault(event.owner, {})
        head = heads.get(event.slug)
        if head is None or (-event.created_at, event.id) < (-head.created_at, head.id):
            heads[event.slug] = event

    # ---- evidence -------------------------------------------------------------------
    def evidence(self, *, run_id: str, trial_id: str, task_name: str, task_event_id: str | None,
                 scripted_events: list[str], observed_channels: list[str]) -> RelayEvidence:
        """The relay-evidence.json document (schema_version 1). No secret appears in it."""
        messages = sorted(self.read(limit=10**9), key=lambda m: (m.created_at, m.id))
        truncated = len(messages) > EXPORT_LIMIT
        lead = [i.pubkey for i in self.identities.values() if i.role == "orchestrator"]
        replies = [m for m in messages if m.pubkey in lead and m.reply_to_event_id == task_event_id]
        return RelayEvidence(
            schema_version=1,
            trial=EvidenceTrial(run_id=run_id, trial_id=trial_id, channel_id=self.channel_id),
            task_name=task_name, task_event_id=task_event_id,
            completion_message_id=replies[-1].id if replies else None,
            identities={i.name: EvidenceIdentity(role=i.role, pubkey=i.pubkey) for i in self.identities.values()},
            directory=[DirectoryEntry.model_validate(d) for d in self.directory()],
            scripted_events=scripted_events, observed_channels=observed_channels,
            message_count=len(messages), truncated=truncated,
            messages=[m.model_copy(deep=True) for m in messages[:EXPORT_LIMIT]],
        )

    def engram_log(self) -> list[JsonObject]:
        """Every engram write (values included) for the trial's own records."""
        names = {p: i.name for p, i in self.identities.items()}
        with self._lock:
            return [{"id": e.id, "owner": names.get(e.owner, e.owner), "slug": e.slug,
                     "tombstone": e.value is None, "bytes": len((e.value or "").encode()),
                     "created_at": e.created_at, "client": e.client} for e in self.engrams]


def _message_json(m: Message) -> JsonObject:
    return m.model_dump(mode="json")
