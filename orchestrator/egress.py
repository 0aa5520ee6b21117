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

A name matched by a name rule is resolved here and connected as is; a name that only an
address rule could allow is resolved once and the connection goes to the address that
matched (no second lookup to rebind). Everything else gets `403` with the reason. A
program that ignores the proxy variables has no way out at all: the allowlist fails closed.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler

from orchestrator.httpserve import BackgroundServer
from orchestrator.log import get_logger

log = get_logger()
CONNECT_TIMEOUT_SEC = 10.0
TUNNEL_IDLE_SEC = 120.0
HOP_HEADERS = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "te",
               "trailer", "transfer-encoding", "upgrade"}


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
                address = info[4][0]
                if self._address_allowed(address):
                    return address
        return None


class EgressProxy:
    """One trial's way out under an allowlist; counts what it let through and refused."""

    def __init__(self, host: str, allowed_hosts: list[str]):
        self.allowlist = Allowlist(allowed_hosts)
        self.open_all = False  # a later phase under `public` (the proxy variables stay set)
        self.allowed: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(_EgressHandler):
            egress = proxy

        self.server = BackgroundServer(Handler, host, name="egress")
        self.host = host

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> EgressProxy:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

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

    def summary(self) -> dict:
        return {"allowed_hosts": self.allowlist.entries, "allowed": dict(self.allowed),
                "refused": dict(self.refused)}


class _EgressHandler(BaseHTTPRequestHandler):
    egress: EgressProxy
    protocol_version = "HTTP/1.1"
    timeout = TUNNEL_IDLE_SEC

    def log_message(self, format: str, *args) -> None:  # counted, not logged per request
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
            upstream = socket.create_connection((target, int(port)), timeout=CONNECT_TIMEOUT_SEC)
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
        port = url.port or 80
        try:
            upstream = socket.create_connection((target, port), timeout=CONNECT_TIMEOUT_SEC)
        except OSError as exc:
            return self._refuse(url.hostname, 502, f"orchestra egress: {url.hostname} unreachable: {exc}\n")
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            upstream.close()
            return self._refuse(url.hostname, 411, "orchestra egress: send a Content-Length\n")
        length = self.headers.get("Content-Length") or "0"
        body = self.rfile.read(int(length)) if length.isdigit() and int(length) > 0 else b""
        path = urllib.parse.urlunsplit(("", "", url.path or "/", url.query, ""))
        head = [f"{self.command} {path} HTTP/1.1"]
        head += [f"{k}: {v}" for k, v in self.headers.items() if k.lower() not in HOP_HEADERS]
        head.append("Connection: close")
        upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        self.close_connection = True
        _tunnel(self.connection, upstream)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward


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
