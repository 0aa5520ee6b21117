"""The trial relay (DESIGN 3.5): identities, a private channel, threaded messages with
mentions, and engram memory; served on the trial network's gateway, exported as evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.services.relay.session import TrialRelay, start_relay

__all__ = ["TrialRelay", "start_relay"]
__getattr__, __dir__ = public_face(__name__, {
    "TrialRelay": "session",
    "start_relay": "session",
})
