"""One trial's relay from start to evidence: identities, server, instruction, scripted
messages, export. trial/lifecycle.py drives it; it never sees HTTP or keys itself."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from orchestrator.log import get_logger
from orchestrator.models import Manifest, RelayEvidence
from orchestrator.services.relay.server import RelayServer
from orchestrator.services.relay.store import Identity, RelayStore
from orchestrator.tasks import Task

log = get_logger()


@dataclass
class TrialRelay:
    store: RelayStore
    server: RelayServer
    lead: Identity
    user: Identity
    task: Task
    trial_id: str
    job: str
    task_event_id: str | None = None
    scripted_events: list[str] = field(default_factory=list)
    started_sec: float = 0.0

    def env_for(self, identity: Identity) -> dict[str, str]:
        """The wiring variables of DESIGN 3.4 for one identity (its own key only)."""
        return {
            "ORCHESTRA_RELAY_URL": self.server.url,
            "ORCHESTRA_PRIVATE_KEY": identity.private_key,
            "ORCHESTRA_AUTH_TAG": self.server.tag_for(identity),
            "ORCHESTRA_CHANNEL_ID": self.store.channel_id,
            "ORCHESTRA_AGENT_ID": identity.name,
        }

    def secrets(self) -> list[str]:
        """Every identity's private key and auth tag: never in a file orchestra writes."""
        identities = list(self.store.identities.values())
        return [i.private_key for i in identities] + [self.server.tag_for(i) for i in identities]

    def leaked_by(self, text: str) -> list[str]:
        """Names of identities whose private key appears (verbatim or reversed) in text."""
        return sorted(i.name for i in self.store.identities.values()
                      if i.private_key in text or i.private_key[::-1] in text)

    def post_instruction(self) -> str:
        """The user posts the instruction, mentioning the orchestrator; then the script."""
        message = self.store.post(self.user, self.task.instruction.strip(),
                                  mentions=[self.lead.pubkey])
        self.task_event_id = message.id
        for item in self.task.config.relay.scripted:
            author = self.store.by_name(item.author)
            reply_to = self.task_event_id if item.reply_to_instruction else None
            mentions = [self.store.by_name(n).pubkey for n in item.mentions]
            posted = self.store.post(author, item.content, reply_to=reply_to, mentions=mentions)
            self.scripted_events.append(posted.id)
        return message.id

    def evidence(self) -> RelayEvidence:
        return self.store.evidence(
            run_id=self.job, trial_id=self.trial_id, task_name=self.task.short_name,
            task_event_id=self.task_event_id, scripted_events=self.scripted_events,
            observed_channels=list(self.task.config.relay.observed_channels),
        )

    def stop(self) -> None:
        self.server.stop()


def start_relay(task: Task, manifest: Manifest, host: str, trial_id: str, job: str) -> TrialRelay:
    started = time.monotonic()
    store = RelayStore(channel_id="ch-" + secrets.token_hex(8))
    lead = None
    for member in manifest.roster:
        for index in range(member.count):
            name = member.id if member.count == 1 else f"{member.id}-{index + 1}"
            identity = store.add_identity(name, "orchestrator" if member.kind == "orchestrator"
                                          else "worker")
            if member.kind == "orchestrator":
                lead = identity
    relay_cfg = task.config.relay
    user = store.add_identity("user", "user", display_name=relay_cfg.user)
    for actor in sorted({s.author for s in relay_cfg.scripted} | {d.name for d in relay_cfg.directory}):
        if actor not in {i.name for i in store.identities.values()}:
            role = next((d.role for d in relay_cfg.directory if d.name == actor), "actor")
            store.add_identity(actor, role)
    assert lead is not None
    server = RelayServer(store, host, secrets.token_bytes(32)).start()
    relay = TrialRelay(store=store, server=server, lead=lead, user=user, task=task,
                       trial_id=trial_id, job=job)
    relay.started_sec = time.monotonic() - started
    log.info("relay.started", trial=trial_id[:12], url=server.url,
             seconds=round(relay.started_sec, 4))
    return relay
