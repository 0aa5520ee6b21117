"""Per-trial servers on the host: one bounded HTTP layer (httpserve), the relay, the
model proxy, the replay endpoint, the egress allowlist proxy and exchange records."""

from orchestrator import public_face

__all__ = ["Upstreams"]
__getattr__, __dir__ = public_face(__name__, {
    "Upstreams": "proxy",
})
