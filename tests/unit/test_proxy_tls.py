"""The proxy keeps its HTTPS connections to the upstream alive between calls (a remote
provider's TLS handshake is not paid per call), over real TLS on loopback."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from test_proxy_apis import first_turn, path_of, send

from orchestrator.models.manifest import Budget
from orchestrator.services.apis.scripted import ScriptedUpstream
from orchestrator.services.proxy import ModelProxy


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_calls_to_an_https_upstream_share_one_kept_alive_connection(certificate, monkeypatch):
    for name in ("HTTPS_PROXY", "https_proxy"):  # behind one, every call has its own connection
        monkeypatch.delenv(name, raising=False)
    cert, key = certificate
    upstream = ScriptedUpstream()
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    upstream.httpd.socket = server_side.wrap_socket(upstream.httpd.socket, server_side=True)
    upstream.start()
    port = upstream.httpd.server_address[1]
    proxy = ModelProxy("127.0.0.1", f"https://127.0.0.1:{port}/v1", "trial-model", "sk-tls", Budget(), {},
                       deadline=time.time() + 30, backoff_max=0.05, upstream_apis=("chat", "messages"),
                       tls=ssl.create_default_context(cafile=str(cert))).start()
    try:
        answers = [send(proxy, api, path_of(api, stream), first_turn(api, stream))
                   for api, stream in (("messages", True), ("messages", False), ("gemini", True), ("chat", False))]
        assert [status for status, _, _ in answers] == [200] * 4 and len(upstream.seen) == 4
        assert proxy.pool.opened == 1  # one TLS handshake for four calls, a stream among them
        idle = proxy.pool._idle[0]
        assert idle.sock is not None
        idle.sock.shutdown(socket.SHUT_RDWR)  # the upstream let it go while idle
        status, body, _ = send(proxy, "chat", path_of("chat", False), first_turn("chat", False))
        assert status == 200 and body["choices"][0]["message"]["tool_calls"]
        assert proxy.pool.opened == 2 and proxy.stats.retries == 0  # replaced at once, not retried
        assert json.dumps(upstream.seen[-1].headers).count("sk-tls") == 1
    finally:
        proxy.stop()
        upstream.stop()
    assert proxy.pool._idle == []


def test_an_upstream_behind_the_environments_proxy_or_over_plain_http_is_not_pooled(monkeypatch):
    from orchestrator.services.apis.forward import Pool

    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert not Pool.serves("https://api.example.com/v1") and not Pool.serves("http://127.0.0.1:8765/v1")
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.delenv("https_proxy", raising=False)
    assert Pool.serves("https://api.example.com/v1")
