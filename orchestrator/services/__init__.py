"""Per-trial servers on the host: one bounded HTTP layer (httpserve), the relay, the
model proxy, the replay endpoint, the egress allowlist proxy and exchange records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator import public_face

if TYPE_CHECKING:
    from orchestrator.services.egress import EgressProxy
    from orchestrator.services.exchanges import (
        RECORD,
        dispatch_event,
        read_exchanges,
        replay_key,
        trajectory_from_exchanges,
    )
    from orchestrator.services.proxy import ModelProxy, Upstream, Upstreams
    from orchestrator.services.relay import TrialRelay, start_relay

__all__ = [
    "RECORD", "EgressProxy", "ModelProxy", "TrialRelay", "Upstream", "Upstreams", "dispatch_event",
    "read_exchanges", "replay_key", "start_relay", "trajectory_from_exchanges",
]
__getattr__, __dir__ = public_face(__name__, {
    "EgressProxy": "egress",
    "RECORD": "exchanges",
    "dispatch_event": "exchanges",
    "read_exchanges": "exchanges",
    "replay_key": "exchanges",
    "trajectory_from_exchanges": "exchanges",
    "ModelProxy": "proxy",
    "Upstream": "proxy",
    "Upstreams": "proxy",
    "TrialRelay": "relay",
    "start_relay": "relay",
})
