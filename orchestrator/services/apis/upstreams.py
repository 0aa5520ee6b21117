"""The endpoints a job uses, resolved once (DESIGN 3.3): where each one's calls go from
the host, its key (read from the host environment only for the endpoints in use), the
model APIs it speaks, and the replay servers started for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator import scrub
from orchestrator.models import Prices, price_of
from orchestrator.services.apis.forward import Deadlines

if TYPE_CHECKING:
    from orchestrator.models import EndpointConfig
    from orchestrator.services.replay import ReplayServer


@dataclass
class Upstream:
    """Where one endpoint's calls go from the host: a real base URL, or a replay server."""

    name: str
    url: str
    model: str
    api_key: str | None
    env: dict[str, str]
    replay: bool = False  # a --replay-from recording: each trial names itself in the path
    apis: tuple[str, ...] = ("chat",)  # the model APIs it speaks (replay servers: chat)
    deadlines: Deadlines = Deadlines()
    prices: Prices | None = None  # the endpoint config's
    output_field: str = "max_tokens"
    max_output_tokens: int | None = None
    text_parts: str = "keep"
    upstream_streams: bool = True
    tool_calls: str = "native"

    def prices_for(self, manifest: dict[str, dict[str, float]]) -> dict[str, float]:
        """This endpoint's model's prices ({}: unknown), the manifest's first."""
        prices = price_of(self.model, manifest, self.prices)
        return prices.model_dump() if prices is not None else {}


class Upstreams:
    """The endpoints a job uses, resolved once: keys read, replay servers started."""

    def __init__(self) -> None:
        self.by_name: dict[str, Upstream] = {}
        self._servers: list[ReplayServer] = []

    @classmethod
    def open(cls, names: set[str], config: EndpointConfig, replay_from: Path | None = None) -> Upstreams:
        """`replay_from`: a job folder whose recorded exchanges answer every endpoint."""
        from orchestrator.services.exchanges import recorded_answers
        from orchestrator.services.replay import ReplayServer, load_script

        upstreams = cls()
        recorded = None  # one server answers every endpoint from the recording (one lock)
        if replay_from is not None:
            recorded = ReplayServer({"recorded": recorded_answers(replay_from)}).start()
            upstreams._servers.append(recorded)
        for name in sorted(names):
            endpoint = config.resolve(name)
            if recorded is not None:
                url, key = recorded.url, None
            elif endpoint.provider == "replay":
                key = config.api_key(name)
                server = ReplayServer(load_script(config.script_path(name)), api_key=key).start()
                upstreams._servers.append(server)
                url = server.url
            else:
                url, key = endpoint.base_url, config.api_key(name)
            speaks = ("chat",) if recorded is not None or endpoint.provider == "replay" else tuple(endpoint.apis)
            timeouts = endpoint.timeouts
            upstreams.by_name[name] = Upstream(
                name, url, endpoint.model, key, dict(endpoint.env), replay=recorded is not None, apis=speaks,
                deadlines=Deadlines(timeouts.connect_sec, timeouts.first_byte_sec, timeouts.idle_sec),
                prices=endpoint.prices,
                output_field=endpoint.output_field, max_output_tokens=endpoint.max_output_tokens,
                text_parts=endpoint.text_parts, upstream_streams=endpoint.stream, tool_calls=endpoint.tool_calls)
        scrub.register(*upstreams.secrets())
        return upstreams

    @classmethod
    def resolved(cls, by_name: dict[str, Upstream]) -> Upstreams:
        """Endpoints resolved elsewhere (the driver, for a Ray node): nothing started here."""
        upstreams = cls()
        upstreams.by_name = dict(by_name)
        scrub.register(*upstreams.secrets())
        return upstreams

    def secrets(self) -> list[str]:
        return [u.api_key for u in self.by_name.values() if u.api_key]

    def close(self) -> None:
        scrub.unregister(*self.secrets())
        for server in self._servers:
            server.stop()
