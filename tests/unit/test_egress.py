"""The egress proxy's guards without an engine: what it never connects to, bodies streamed
(never held whole), the destination's own Host; the exchanges cap; which gateway ports a
trial's firewall opens."""

from __future__ import annotations

import http.server
import socket
import threading
import tracemalloc

import pytest

from orchestrator.services.egress import EgressProxy, HostAddresses, _local_addresses
from orchestrator.services.exchanges import ExchangeLog
from orchestrator.trial.sandbox import gateway_ports


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"),
    ("10.213.4.17", "orchestra's trial networks"), ("224.0.0.1", "multicast"),
    ("93.184.216.34", None), ("2606:4700::1111", None)])
def test_the_proxy_never_connects_to_the_host_whatever_the_allowlist(address, why):
    found = HostAddresses().forbidden(address)
    assert (found is None) if why is None else (why in found), found


def test_the_hosts_own_addresses_and_its_bridges_are_refused():
    guard = HostAddresses()
    own = [a for a in _local_addresses() if not a.is_loopback]
    assert own, "the host has an address besides loopback"
    assert all(guard.forbidden(str(a)) for a in own)


class Sink(http.server.BaseHTTPRequestHandler):
    """An upstream that reads bodies in chunks and records what it got."""

    seen: dict = {}

    def do_POST(self):  # noqa: N802
        left, total = int(self.headers["Content-Length"]), 0
        while left:
            chunk = self.rfile.read(min(left, 65536))
            left -= len(chunk)
            total += len(chunk)
        Sink.seen.update(host=self.headers["Host"], bytes=total)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class Permissive(HostAddresses):
    def forbidden(self, address: str):  # a unit test's upstream lives on loopback
        return None


def test_a_body_is_streamed_to_its_destination_with_the_destinations_own_host():
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    proxy = EgressProxy("127.0.0.1", ["127.0.0.1"], guard=Permissive()).start()
    port = upstream.server_address[1]
    size = 48 * 1024 * 1024
    try:
        tracemalloc.start()
        with socket.create_connection(proxy.server.httpd.server_address[:2], timeout=30) as s:
            s.sendall(f"POST http://127.0.0.1:{port}/up HTTP/1.1\r\nHost: evil.example\r\n"
                      f"Content-Length: {size}\r\n\r\n".encode())
            block = b"x" * 65536
            for _ in range(size // len(block)):
                s.sendall(block)
            answer = s.recv(100)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        proxy.stop()
        upstream.shutdown()
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer
    assert Sink.seen == {"host": f"127.0.0.1:{port}", "bytes": size}
    assert peak < 8 * 1024 * 1024  # never the 48 MiB body whole


def test_exchanges_past_the_total_cap_are_counted_not_written(tmp_path):
    log = ExchangeLog(tmp_path / "x.jsonl", lambda b: b, max_total=1000)
    for _ in range(10):
        log.write(b'{"m": "' + b"a" * 200 + b'"}', 200, b"{}", 0.0, 1, False)
    summary = log.summary()
    assert (tmp_path / "x.jsonl").stat().st_size <= 1000
    assert summary.exchanges_written == len((tmp_path / "x.jsonl").read_text().splitlines()) >= 1
    assert summary.exchanges_written + summary.exchanges_dropped == 10 and summary.exchanges_dropped_bytes > 0


def test_the_firewall_opens_the_ports_of_the_urls_a_trial_is_given_on_its_gateway():
    env = {"ORCHESTRA_RELAY_URL": "http://10.213.0.1:4100", "ORCHESTRA_MODEL_URL": "http://10.213.0.1:4200/v1",
           "http_proxy": "http://10.213.0.1:4300", "no_proxy": "localhost,127.0.0.1,10.213.0.1",
           "OTHER": "http://10.213.0.17:9999", "TOKEN": "not a url"}
    assert gateway_ports(env, "10.213.0.1") == [4100, 4200, 4300]
