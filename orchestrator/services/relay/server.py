"""The relay's HTTP face: JSON over HTTP, every request signed (see auth.py).

One server per trial, bound to the trial network's gateway address on an ephemeral port,
so a container on an `--internal` network reaches it and nothing else.
"""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections import OrderedDict
from email.message import Message
from urllib.parse import parse_qs, urlsplit

from orchestrator.log import get_logger
from orchestrator.models import RelayRecord
from orchestrator.services.httpserve import BackgroundServer, HttpError, JsonHandler, OnOneServer
from orchestrator.services.relay import auth
from orchestrator.services.relay.store import (
    EXPORT_LIMIT,
    EngramEvent,
    Identity,
    RelayError,
    RelayStore,
    _message_json,
    value_hash,
)
from orchestrator.tasks import MAX_VALUE_BYTES, SlugError
from orchestrator.util import JsonObject

log = get_logger()
MAX_BODY = MAX_VALUE_BYTES * 2 + 4096


MAX_REJECTIONS_KEPT = 20  # reasons kept for the result; all are counted


class RelayServer(OnOneServer):
    def __init__(self, store: RelayStore, host: str, relay_secret: bytes):
        self.store, self.secret = store, relay_secret
        # Nonces are only needed while their timestamp is inside the skew window (older
        # requests are refused on their timestamp): kept in arrival order and pruned.
        self._nonces: OrderedDict[str, float] = OrderedDict()
        self._nonce_lock = threading.Lock()
        self.rejections: list[str] = []
        self.rejected = 0
        self.limit_hits: dict[str, int] = {}
        handler = type("Handler", (_Handler,), {"relay": self})
        self.server = BackgroundServer(handler, host, name="relay", max_body=MAX_BODY)

    def note_rejection(self, reason: str) -> None:
        self.rejected += 1
        if len(self.rejections) < MAX_REJECTIONS_KEPT:
            self.rejections.append(reason)

    def note_limit(self, status: int, reason: str) -> None:
        key = f"{status}: {reason.split(':')[0][:60]}"
        self.limit_hits[key] = self.limit_hits.get(key, 0) + 1

    def record_bounds(self, record: RelayRecord) -> None:
        """Fill in what the trial's result records about this relay's bounds."""
        record.rejected, record.rejections = self.rejected, list(self.rejections)
        record.limit_hits, record.connections_refused = dict(self.limit_hits), self.server.refused
        record.messages, record.engram_events, record.stored_bytes = self.store.usage()

    def tag_for(self, identity: Identity) -> str:
        return auth.auth_tag(self.secret, identity.pubkey)

    # ---- authentication ----------------------------------------------------------
    def authenticate(self, method: str, path: str, headers: Message, body: bytes) -> Identity:
        values = [value for h in auth.HEADERS if (value := headers.get(h))]
        if len(values) != len(auth.HEADERS):
            raise RelayError(401, "unauthenticated: missing X-Orchestra-* signature headers")
        pubkey, tag, timestamp, nonce, signature = values
        identity = self.store.identities.get(pubkey)
        if identity is None:
            raise RelayError(401, "unauthenticated: unknown pubkey")
        if not hmac.compare_digest(tag, self.tag_for(identity)):
            raise RelayError(401, "unauthenticated: auth tag does not belong to this pubkey")
        try:
            skew = abs(time.time() - int(timestamp))
        except ValueError:
            raise RelayError(401, "unauthenticated: bad timestamp") from None
        if skew > auth.MAX_SKEW_SEC:
            raise RelayError(401, "unauthenticated: timestamp too far from the relay's clock")
        expected = auth.sign(identity.private_key, method, path, timestamp, nonce, body)
        if not hmac.compare_digest(signature, expected):
            raise RelayError(401, "unauthenticated: bad signature (wrong key or altered request)")
        with self._nonce_lock:
            if nonce in self._nonces:
                raise RelayError(401, "unauthenticated: replayed request (nonce already used)")
            now = time.time()
            self._nonces[nonce] = now
            while self._nonces and next(iter(self._nonces.values())) < now - 2 * auth.MAX_SKEW_SEC:
                self._nonces.popitem(last=False)
        return identity

    # ---- routes ------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers: Message, body: bytes) -> tuple[int, JsonObject]:
        identity = self.authenticate(method, raw_path, headers, body)
        url = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        data = _json_body(body) if body else {}
        store = self.store
        route = (method, url.path)
        if route == ("GET", "/v1/whoami"):
            return 200, {"name": identity.name, "role": identity.role, "pubkey": identity.pubkey,
                         "channel_id": store.channel_id}
        if route == ("GET", "/v1/directory"):
            return 200, {"identities": store.directory()}
        if url.path == f"/v1/channels/{store.channel_id}/messages":
            if method == "GET":
                raw = query.get("limit", "200")
                if not raw.isdigit() or not 1 <= int(raw) <= EXPORT_LIMIT:
                    raise RelayError(400, f"limit: an integer from 1 to {EXPORT_LIMIT}")
                limit = int(raw)
                return 200, {"messages": [_message_json(m) for m in store.read(limit)]}
            if method == "POST":
                message = store.post(identity, data.get("content"), data.get("reply_to"),
                                     data.get("mentions") or [])
                return 201, {"id": message.id, "created_at": message.created_at}
        if url.path.startswith("/v1/channels/"):
            raise RelayError(403, "channel: not a channel of this identity")
        if url.path == "/v1/engrams":
            if method == "GET" and "slug" not in query:
                return 200, {"engrams": [_engram_json(e) for e in store.list_engrams(identity)]}
            if "owner" in query and query["owner"] != identity.pubkey:
                raise RelayError(403, "engrams: an identity reads and writes only its own")
            slug = query.get("slug", "")
            if method == "GET":
                event = store.engram(identity, slug)
                if event is None:
                    raise RelayError(404, f"{slug}: no such engram")
                return 200, {**_engram_json(event), "value": event.value}
            if method == "PUT":
                value = data.get("value")
                if not isinstance(value, str):
                    raise RelayError(400, "value: a string is required")
                event = store.write_engram(identity, slug, value, data.get("base_hash"),
                                           client=str(data.get("client", ""))[:64])
                return 200, _engram_json(event)
            if method == "DELETE":
                event = store.write_engram(identity, slug, None, client="rm")
                return 200, _engram_json(event)
        raise RelayError(404, f"{method} {url.path}: no such route")


def _engram_json(event: EngramEvent) -> JsonObject:
    return {"slug": event.slug, "id": event.id, "created_at": event.created_at,
            "hash": value_hash(event.value) if event.value is not None else None,
            "bytes": len(event.value.encode()) if event.value is not None else 0}


def _json_body(body: bytes) -> JsonObject:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RelayError(400, "body: not JSON") from None
    if not isinstance(data, dict):
        raise RelayError(400, "body: a JSON object is required")
    return data


class _Handler(JsonHandler):
    relay: RelayServer
    event = "relay.request"

    def _serve(self) -> None:
        retry_after = None
        try:
            body = self.read_body(MAX_BODY)  # framing, size and rate checked before reading
            status, payload = self.relay.handle(self.command, self.path, self.headers, body)
        except (RelayError, HttpError) as exc:
            status, payload = exc.status, {"error": str(exc)}
            retry_after = getattr(exc, "retry_after", None)
            if status == 401 or status == 403:
                self.relay.note_rejection(str(exc))
            elif status in (411, 413, 429, 507):
                self.relay.note_limit(status, str(exc))
        except SlugError as exc:
            status, payload = 400, {"error": str(exc)}
        except Exception as exc:  # a bug must not kill the relay thread
            log.error("relay.error", error=str(exc))
            status, payload = 500, {"error": f"relay error: {exc.__class__.__name__}"}
        self.reply(status, payload, retry_after)

    do_GET = do_POST = do_PUT = do_DELETE = _serve
