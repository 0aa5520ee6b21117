"""Allowlist egress (Harbor's `network_mode = "allowlist"` with `allowed_hosts`).

A trial under an allowlist runs on an internal network (no route out) and gets one way
out: this filtering HTTP proxy on its network's gateway, named by HTTP_PROXY/HTTPS_PROXY
(and their lower-case forms; NO_PROXY keeps the relay and model proxy direct). It serves
HTTP CONNECT (TLS and anything else tunnelled) and plain HTTP with an absolute URI, and lets
through only destinations the allowlist names, exactly as Harbor classifies entries:

- `host.example.com`: that host name;
- `*.example.com`: any name under example.com (not example.com itself);
- `192.0.2.7`, `2001:db8::1`: that address (also when a name resolves to it);
- `192.0.2.0/24`, `2001:db8::/32`: any address in the range.

A name is resolved here once and the connection goes to an address of that answer (no
second lookup to rebind). Everything else gets `403` with the reason. A program that
ignores the proxy variables has no way out at all: the allowlist fails closed.

Whatever the allowlist says (`10.0.0.0/8` covers orchestra's own subnets), the proxy never
connects to the host itself: loopback, link-local (cloud metadata), unspecified and
multicast addresses, orchestra's trial subnets, any address of the host's own interfaces
and the subnets of its bridges (other trials' relays and model proxies, other containers).
The refusal says which rule it met.

Plain-HTTP requests go through the same bounds as the relay's (httpserve): a body is framed
by a valid Content-Length no larger than MAX_BODY, checked before a byte is read, and is
streamed to the destination at most BODY_RATE a second, never held whole. The Host header
sent on is the destination's own (the URL's), never the client's.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import threading
import time
import urllib.parse
from email.message import Message
from http.server import BaseHTTPRequestHandler

from orchestrator.log import get_logger
from orchestrator.models import EgressRecord
from orchestrator.runtime import DEFAULT_RANGE, host_routes
from orchestrator.services.httpserve import BackgroundServer, HttpError, OnOneServer

log = get_logger()
CONNECT_TIMEOUT_SEC = 10.0
TUNNEL_IDLE_SEC = 120.0
MAX_BODY = 256 * 1024 * 1024  # a plain-HTTP request body; larger gets 413 before a byte is read
BODY_RATE = 16 * 1024 * 1024  # plain-HTTP body bytes a second, streamed
CHUNK = 64 * 1024
HOP_HEADERS = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "te",
               "trailer", "transfer-encoding", "upgrade"}


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _local_addresses() -> set[Address]:
    """Every address of the host's own interfaces (IPv4 from the kernel's LOCAL routes,
    IPv6 from if_inet6)."""
    found: set[Address] = set()
    try:
        lines = open("/proc/net/fib_trie").read().splitlines()
    except OSError:
        lines = []
    for before, line in zip(lines, lines[1:], strict=False):
        if "/32 host LOCAL" in line:
            try:
                found.add(ipaddress.ip_address(before.strip().lstrip("|-+ ").strip()))
            except ValueError:
                pass
    try:
        for line in open("/proc/net/if_inet6").read().splitlines():
            raw = line.split()[0]
            found.add(ipaddress.ip_address(":".join(raw[i:i + 4] for i in range(0, 32, 4))))
    except (OSError, IndexError, ValueError):
        pass
    return found


class HostAddresses:
    """What the proxy never connects to, read from the kernel (cached for a few seconds:
    trial bridges come and go)."""

    TTL_SEC = 5.0

    def __init__(self, extra: list[str] | None = None):
        self.orchestra = ipaddress.ip_network(DEFAULT_RANGE, strict=False)
        self.extra = [ipaddress.ip_network(e, strict=False) for e in (extra or [])]
        self._at = -1e9
        self._local: set[Address] = set()
        self._bridges: list[Net] = []

    def _refresh(self) -> None:
        if time.monotonic() - self._at > self.TTL_SEC:
            self._local = _local_addresses()
            self._bridges = [ipaddress.ip_network(n) for n in host_routes(bridges_only=True)]
            self._at = time.monotonic()

    def forbidden(self, address: str) -> str | None:
        """Why `address` must not be connected to, or None."""
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return "not an address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_loopback:
            return "loopback"
        if ip.is_link_local:
            return "link-local (cloud metadata lives there)"
        if ip.is_unspecified or ip.is_multicast:
            return "unspecified or multicast"
        if ip.version == self.orchestra.version and ip in self.orchestra:
            return f"orchestra's trial networks ({self.orchestra})"
        if any(ip.version == n.version and ip in n for n in self.extra):
            return "a network orchestra keeps out of reach"
        self._refresh()
        if ip in self._local:
            return "an address of this host"
        if any(ip.version == n.version and ip in n for n in self._bridges):
            return "a container network on this host"
        return None


class Refused(Exception):
    """The proxy will not connect there; the message says why."""


def connect(host: str, port: int, guard: HostAddresses) -> socket.socket:
    """A connection to `host` (a name is resolved once here) at an address the guard
    allows; Refused when every address it has is the host's own."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise OSError(f"cannot resolve {host}: {exc}") from exc
    reasons, last_error = [], None
    for family, kind, proto, _name, address in infos:
        ip = str(address[0])  # an IPv4 or IPv6 address: what a host name resolves to
        why = guard.forbidden(ip)
        if why:
            reasons.append(f"{ip} is {why}")
            continue
        sock = socket.socket(family, kind, proto)
        sock.settimeout(CONNECT_TIMEOUT_SEC)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        sock.settimeout(None)
        return sock
    if last_error is not None:
        raise last_error
    raise Refused(f"{host} resolves only to addresses orchestra never connects to: "
                  + "; ".join(dict.fromkeys(reasons)))


class Allowlist:
    def __init__(self, entries: list[str]):
        self.entries = list(entries)
        self.names: set[str] = set()
        self.suffixes: list[str] = []
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if entry.startswith("*."):
                self.suffixes.append(entry[1:])  # ".example.com"
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.names.add(entry)

    def _address_allowed(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    def resolve(self, host: str) -> str | None:
        """Where to connect for `host`, or None when the allowlist does not let it through."""
        host = host.strip("[]").lower().rstrip(".")
        try:
            ipaddress.ip_address(host)
            return host if self._address_allowed(host) else None
        except ValueError:
            pass
        if host in self.names or any(host.endswith(s) for s in self.suffixes):
            return host
        if self.networks:
            try:
                infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            except OSError:
                return None
            for info in infos:
                address = str(info[4][0])  # an IPv4 or IPv6 address
                if self._address_allowed(address):
                    return address
        return None


class EgressProxy(OnOneServer):
    """One trial's way out under an allowlist; counts what it let through and refused."""

    def __init__(self, host: str, allowed_hosts: list[str], guard: HostAddresses | None = None):
        self.allowlist = Allowlist(allowed_hosts)
        self.guard = guard or HostAddresses()
        self.open_all = False  # a later phase under `public` (the proxy variables stay set)
        self.allowed: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(_EgressHandler):
            egress = proxy

        self.server = BackgroundServer(Handler, host, name="egress", max_body=MAX_BODY,
                                       body_rate=BODY_RATE)
        self.host = host

    def set_policy(self, mode: str, allowed_hosts: list[str] | None = None) -> None:
        """The phase's policy: `allowlist` (its hosts), `public` (anything) or `no-network`
        (nothing)."""
        self.open_all = mode == "public"
        self.allowlist = Allowlist((allowed_hosts or []) if mode == "allowlist" else [])

    def env(self, direct: list[str]) -> dict[str, str]:
        """Proxy variables for the container; `direct` hosts (the relay, the model proxy)
        are never sent through it."""
        no_proxy = ",".join(["localhost", "127.0.0.1", *direct])
        return {name: value for key in ("http_proxy", "https_proxy", "no_proxy")
                for name, value in ((key, self.url if key != "no_proxy" else no_proxy),
                                    (key.upper(), self.url if key != "no_proxy" else no_proxy))}

    def decide(self, host: str) -> str | None:
        target = host.strip("[]") if self.open_all else self.allowlist.resolve(host)
        with self._lock:
            counts = self.allowed if target is not None else self.refused
            if host in counts or len(counts) < 50:
                counts[host] = counts.get(host, 0) + 1
        if target is None:
            log.info("egress.refused", host=host[:200])
        return target

    def summary(self) -> EgressRecord:
        with self._lock:
            return EgressRecord(allowed_hosts=list(self.allowlist.entries), allowed=dict(self.allowed),
                                refused=dict(self.refused))


class _EgressHandler(BaseHTTPRequestHandler):
    egress: EgressProxy
    protocol_version = "HTTP/1.1"
    timeout = TUNNEL_IDLE_SEC

    def log_message(self, format: str, *args: object) -> None:  # counted, not logged per request
        pass

    def _refuse(self, host: str, status: int = 403, why: str | None = None) -> None:
        body = (why or f"orchestra egress: {host} is not in this trial's allowed_hosts "
                       f"({', '.join(self.egress.allowlist.entries) or 'none'})\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_CONNECT(self) -> None:  # noqa: N802
        host, _, port = self.path.rpartition(":")
        if not host or not port.isdigit():
            return self._refuse(self.path, 400, "orchestra egress: CONNECT host:port expected\n")
        target = self.egress.decide(host)
        if target is None:
            return self._refuse(host)
        try:
            upstream = connect(target, int(port), self.egress.guard)
        except Refused as exc:
            return self._refuse(host, 403, f"orchestra egress: {exc}\n")
        except OSError as exc:
            return self._refuse(host, 502, f"orchestra egress: {host}:{port} unreachable: {exc}\n")
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        _tunnel(self.connection, upstream)

    def _forward(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            return self._refuse(self.path[:200], 400, "orchestra egress: an absolute http:// URL "
                                                      "is expected (use CONNECT for https)\n")
        target = self.egress.decide(url.hostname)
        if target is None:
            return self._refuse(url.hostname)
        try:
            length = _body_length(self.headers)
        except HttpError as exc:
            return self._refuse(url.hostname, exc.status, f"orchestra egress: {exc}\n")
        try:
            port = url.port or 80
            upstream = connect(target, port, self.egress.guard)
        except Refused as exc:
            return self._refuse(url.hostname, 403, f"orchestra egress: {exc}\n")
        except (OSError, ValueError) as exc:
            return self._refuse(url.hostname, 502, f"orchestra egress: {url.hostname} unreachable: {exc}\n")
        path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
        authority = url.hostname if ":" not in url.hostname else f"[{url.hostname}]"
        head = [f"{self.command} {path} HTTP/1.1", f"Host: {authority}" + (f":{url.port}" if url.port else "")]
        head += [f"{k}: {v}" for k, v in self.headers.items() if k.lower() not in HOP_HEADERS | {"host"}]
        head.append("Connection: close")
        try:
            upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            self._stream_body(upstream, length)
        except OSError:
            upstream.close()
            self.close_connection = True
            return
        self.close_connection = True
        _tunnel(self.connection, upstream)

    def _stream_body(self, upstream: socket.socket, length: int) -> None:
        """The request body to the destination in chunks, paced by the server's budget."""
        budget = self.server.budget  # type: ignore[attr-defined]
        while length > 0:
            chunk = self.rfile.read(min(CHUNK, length))
            if not chunk:
                raise OSError("the client closed before its body was sent")
            length -= len(chunk)
            if budget is not None:
                time.sleep(budget.pace(len(chunk)))
            upstream.sendall(chunk)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward


def _body_length(headers: Message) -> int:
    """The request body's Content-Length, checked as httpserve checks it."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        raise HttpError(411, "send a Content-Length (chunked bodies are not accepted)")
    raw = (headers.get("Content-Length") or "0").strip()
    if not raw.isdigit():
        raise HttpError(400, f"Content-Length: {raw[:20]!r} is not a non-negative integer")
    if int(raw) > MAX_BODY:
        raise HttpError(413, f"body: {raw} bytes is over the {MAX_BODY} byte limit")
    return int(raw)


def _tunnel(client: socket.socket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes or nothing moves for TUNNEL_IDLE_SEC."""
    try:
        sockets = [client, upstream]
        while True:
            ready, _, _ = select.select(sockets, [], [], TUNNEL_IDLE_SEC)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)
    except OSError:
        return
    finally:
        upstream.close()
