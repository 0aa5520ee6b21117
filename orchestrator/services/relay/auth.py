"""Keys and request signatures.

Each identity has a private key (32 random bytes, hex). Its public id ("pubkey") is
sha256("orchestra-pubkey:" + private key). The harness binds a pubkey to the trial with an
auth tag: HMAC(relay secret, pubkey). Every request carries pubkey, auth tag, a unix
timestamp, a nonce and a signature: HMAC-SHA256(private key, canonical request), where the
canonical request is METHOD, path with query, timestamp, nonce and sha256(body), joined by
newlines. The relay rejects an unknown pubkey, a bad tag, a bad signature, a timestamp more
than MAX_SKEW seconds off, and a nonce it has already seen (a replay).

images/agent-stack/lib/orchestra_client.py signs the same way (stdlib only, kept in step
by tests/unit/test_mem_cli.py and tests/integration/test_relay_tasks.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

MAX_SKEW_SEC = 300
HEADERS = ("X-Orchestra-Pubkey", "X-Orchestra-Auth-Tag", "X-Orchestra-Timestamp",
           "X-Orchestra-Nonce", "X-Orchestra-Signature")


def new_private_key() -> str:
    return secrets.token_hex(32)


def pubkey_of(private_key: str) -> str:
    return hashlib.sha256(f"orchestra-pubkey:{private_key}".encode()).hexdigest()


def auth_tag(relay_secret: bytes, pubkey: str) -> str:
    return hmac.new(relay_secret, pubkey.encode(), hashlib.sha256).hexdigest()


def canonical(method: str, path: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    return "\n".join([method.upper(), path, timestamp, nonce,
                      hashlib.sha256(body).hexdigest()]).encode()


def sign(private_key: str, method: str, path: str, timestamp: str, nonce: str,
         body: bytes) -> str:
    message = canonical(method, path, timestamp, nonce, body)
    return hmac.new(private_key.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(private_key: str, tag: str, method: str, path: str, body: bytes,
                   now: float) -> dict[str, str]:
    timestamp, nonce = str(int(now)), secrets.token_hex(12)
    return dict(zip(HEADERS, (pubkey_of(private_key), tag, timestamp, nonce,
                              sign(private_key, method, path, timestamp, nonce, body)),
                    strict=True))
