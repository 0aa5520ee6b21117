"""Stdlib-only client for the trial relay, used by `mem`, `chan` and the reference agent.

Signing matches orchestrator/services/relay/auth.py: HMAC-SHA256(private key, METHOD \\n path \\n
timestamp \\n nonce \\n sha256(body)); pubkey = sha256("orchestra-pubkey:" + private key).
"""

import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

SLUG = re.compile(r"^mem/[a-z0-9][a-z0-9_-]{0,63}(/[a-z0-9][a-z0-9_-]{0,63})*$")
MAX_SLUG_BYTES = 255
MAX_VALUE_BYTES = 65535


class UsageError(Exception):
    """Bad arguments: exit 2, nothing sent."""


class RelayError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def normalise_slug(raw):
    slug = raw.strip().lower()
    if not slug.startswith("mem/"):
        slug = "mem/" + slug
    if len(slug.encode()) > MAX_SLUG_BYTES:
        raise UsageError("slug %r: longer than %d bytes" % (raw, MAX_SLUG_BYTES))
    if not SLUG.match(slug):
        raise UsageError("slug %r: must match %s" % (raw, SLUG.pattern))
    if slug == "mem/core":
        raise UsageError("slug %r: 'core' is reserved" % raw)
    return slug


def pubkey_of(private_key):
    return hashlib.sha256(("orchestra-pubkey:" + private_key).encode()).hexdigest()


class Client:
    def __init__(self, url=None, private_key=None, auth_tag=None, channel_id=None):
        env = os.environ
        self.url = (url or env.get("ORCHESTRA_RELAY_URL") or "").rstrip("/")
        self.key = private_key or env.get("ORCHESTRA_PRIVATE_KEY") or ""
        self.tag = auth_tag or env.get("ORCHESTRA_AUTH_TAG") or ""
        self.channel = channel_id or env.get("ORCHESTRA_CHANNEL_ID") or ""
        if not (self.url and self.key and self.tag):
            raise UsageError("no relay configured: ORCHESTRA_RELAY_URL, ORCHESTRA_PRIVATE_KEY "
                             "and ORCHESTRA_AUTH_TAG must be set")

    def request(self, method, path, body=None, query=None):
        if query:
            path = path + "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else b""
        timestamp, nonce = str(int(time.time())), secrets.token_hex(12)
        digest = hashlib.sha256(data).hexdigest()
        message = "\n".join([method, path, timestamp, nonce, digest]).encode()
        headers = {
            "X-Orchestra-Pubkey": pubkey_of(self.key),
            "X-Orchestra-Auth-Tag": self.tag,
            "X-Orchestra-Timestamp": timestamp,
            "X-Orchestra-Nonce": nonce,
            "X-Orchestra-Signature": hmac.new(self.key.encode(), message, hashlib.sha256).hexdigest(),
            "Content-Type": "application/json",
        }
        req = urllib.request.Request(self.url + path, data=data if data else None,
                                     method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise RelayError(exc.code, message) from None
        except urllib.error.URLError as exc:
            raise RelayError(0, "relay unreachable at %s: %s" % (self.url, exc.reason)) from None

    # engrams
    def engrams(self):
        return self.request("GET", "/v1/engrams")["engrams"]

    def engram(self, slug):
        return self.request("GET", "/v1/engrams", query={"slug": slug})

    def set_engram(self, slug, value, base_hash=None, client="mem"):
        body = {"value": value, "client": client}
        if base_hash is not None:
            body["base_hash"] = base_hash
        return self.request("PUT", "/v1/engrams", body, query={"slug": slug})

    def remove_engram(self, slug):
        return self.request("DELETE", "/v1/engrams", query={"slug": slug})

    # channel
    def whoami(self):
        return self.request("GET", "/v1/whoami")

    def directory(self):
        return self.request("GET", "/v1/directory")["identities"]

    def messages(self, limit=200):
        return self.request("GET", "/v1/channels/%s/messages" % self.channel,
                            query={"limit": str(limit)})["messages"]

    def post(self, content, reply_to=None, mentions=None):
        body = {"content": content, "reply_to": reply_to, "mentions": mentions or []}
        return self.request("POST", "/v1/channels/%s/messages" % self.channel, body)


def read_stdin_bounded(limit=MAX_VALUE_BYTES):
    """Read at most limit + 1 bytes, so an oversize value is detected without reading it all."""
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise UsageError("value: longer than %d bytes" % limit)
    return data.decode("utf-8")


def run_main(main):
    """Exit codes: 0 ok, 1 relay refused, 2 usage error, 3 conflict."""
    try:
        sys.exit(main(sys.argv[1:]) or 0)
    except UsageError as exc:
        sys.stderr.write("usage error: %s\n" % exc)
        sys.exit(2)
    except RelayError as exc:
        sys.stderr.write("error: %s\n" % exc)
        sys.exit(3 if exc.status == 409 else 1)
    except UnicodeDecodeError:
        sys.stderr.write("usage error: value is not UTF-8\n")
        sys.exit(2)
