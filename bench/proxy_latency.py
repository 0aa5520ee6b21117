"""The model proxy's cost (DESIGN 7: at most 1 ms added per call at p50, the first streamed
byte within 5 ms of a direct call), measured in one run against a direct call to the same
scripted upstream (orchestrator.services.apis.scripted) on loopback. `name=value` lines,
no assertions:

  proxy_added_ms_p50_<api>_<mode>   median whole-call round trip through the proxy minus
                                    the direct one (mode: relay = the upstream speaks the
                                    agent's API; translate = through chat)
  proxy_ratio_p50_<api>_<mode>      the same as a ratio (through the proxy / direct)
  proxy_ttfb_added_ms_p50_<api>     median time to the first streamed byte of a relayed
                                    stream, through the proxy minus direct
  proxy_ttfb_ratio_p50_<api>        the same as a ratio
  proxy_added_ms_p50_chat_https_pooled / _per_call   a chat call to an HTTPS upstream
                                    through the proxy minus direct (the client keeps its
                                    connection): the proxy's kept-alive connections, and a
                                    connection (a TLS handshake) per call, as before them
  proxy_ttfb_added_ms_p50_<api>_translate   the same for a text answer translated from the
                                    upstream's chat stream, against a direct chat stream
                                    (a tool call is sent whole, at the stream's end)

Each client keeps one connection open, as agents' HTTP clients do; the proxy opens one to
the upstream per call. The proxy's request-rate cap (25 a second per trial, a hostile
agent's bound) is lifted here: this measures a call's cost, not the cap.

    python bench/proxy_latency.py [calls]      (default 200 per line)
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit"))

from test_proxy_apis import auth, first_turn, path_of, second_turn  # noqa: E402  (the suite's request shapes)

from orchestrator.models.manifest import Budget  # noqa: E402
from orchestrator.services.apis.scripted import Script, ScriptedUpstream  # noqa: E402
from orchestrator.services.proxy import ModelProxy  # noqa: E402

ALL = ("chat", "responses", "messages", "gemini")


def emit(name: str, value: object) -> None:
    print(f"{name}={value}", flush=True)


def timed(base: str, api: str, body: dict, headers: dict, calls: int, stream: bool) -> list[float]:
    """Seconds per call (whole answer), or to the first body byte when `stream`."""
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=30) if url.scheme == "https" \
        else http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    path = path_of(api, stream)
    data = json.dumps(body).encode()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        conn.request("POST", path, data, {"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        if stream:
            response.readline()
            times.append(time.perf_counter() - start)
            response.read()
        else:
            response.read()
            times.append(time.perf_counter() - start)
        assert response.status == 200, (api, response.status)
    conn.close()
    return times


def proxy_for(upstream: ScriptedUpstream, apis: tuple[str, ...], url: str | None = None) -> ModelProxy:
    proxy = ModelProxy("127.0.0.1", (url or upstream.url) + "/v1", "bench-model", "sk-bench", Budget(), {},
                       deadline=time.time() + 3600, upstream_apis=apis)
    proxy.server.httpd.requests = None  # the per-trial request rate: not what is measured here
    return proxy.start()


def main(calls: int = 200) -> None:
    upstream = ScriptedUpstream(Script()).start()
    relay, translate = proxy_for(upstream, ALL), proxy_for(upstream, ("chat",))
    try:
        for api in ALL:
            body = first_turn(api, False)
            timed(upstream.url, api, body, {}, 20, False)  # warm both paths
            direct = statistics.median(timed(upstream.url, api, body, {}, calls, False))
            for mode, proxy in (("relay", relay), ("translate", translate)):
                if mode == "translate" and api == "chat":
                    continue  # chat to a chat upstream is always relayed
                through = statistics.median(timed(proxy.root_url, api, body, auth(api, proxy.token), calls, False))
                emit(f"proxy_added_ms_p50_{api}_{mode}", round((through - direct) * 1000, 3))
                emit(f"proxy_ratio_p50_{api}_{mode}", round(through / direct, 2))
        upstream.script.chunk_delay = 0.002  # a stream that takes a while after its first event
        for api in ALL:
            body = first_turn(api, True)
            direct = statistics.median(timed(upstream.url, api, body, {}, calls // 2, True))
            through = statistics.median(timed(relay.root_url, api, body, auth(api, relay.token), calls // 2, True))
            emit(f"proxy_ttfb_added_ms_p50_{api}", round((through - direct) * 1000, 3))
            emit(f"proxy_ttfb_ratio_p50_{api}", round(through / direct, 2))
        call = {"id": "call-1", "name": "shell", "args": {"command": "true"}}
        texts = {api: second_turn(api, first_turn(api, True), call, "ok") for api in ALL}  # answered in text
        direct = statistics.median(timed(upstream.url, "chat", texts["chat"], {}, calls // 2, True))
        for api in ALL[1:]:  # translated: the first byte of the agent's API's stream vs chat's, direct
            body = texts[api]
            through = statistics.median(timed(translate.root_url, api, body, auth(api, translate.token),
                                              calls // 2, True))
            emit(f"proxy_ttfb_added_ms_p50_{api}_translate", round((through - direct) * 1000, 3))
            emit(f"proxy_ttfb_ratio_p50_{api}_translate", round(through / direct, 2))
    finally:
        relay.stop()
        translate.stop()
        upstream.stop()


def https(calls: int) -> None:
    """An HTTPS upstream (a self-signed certificate the process trusts): the proxy with its
    kept-alive connections, and with a connection (a TLS handshake) per call."""
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                        "-out", str(cert)], check=True, capture_output=True)
        os.environ["SSL_CERT_FILE"] = str(cert)  # this process's clients (urllib, http.client) trust it
        upstream = ScriptedUpstream(Script())
        server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_side.load_cert_chain(cert, key)
        upstream.httpd.socket = server_side.wrap_socket(upstream.httpd.socket, server_side=True)
        upstream.start()
        url = f"https://127.0.0.1:{upstream.httpd.server_address[1]}"
        pooled, unpooled = proxy_for(upstream, ("chat",), url), proxy_for(upstream, ("chat",), url)
        unpooled.pool.serves = lambda url: False  # type: ignore[method-assign]  (urllib: a connection a call)
        try:
            body = first_turn("chat", False)
            timed(url, "chat", body, {}, 20, False)
            direct = statistics.median(timed(url, "chat", body, {}, calls, False))
            for name, proxy in (("pooled", pooled), ("per_call", unpooled)):
                through = statistics.median(timed(proxy.root_url, "chat", body, auth("chat", proxy.token), calls, False))
                emit(f"proxy_added_ms_p50_chat_https_{name}", round((through - direct) * 1000, 3))
        finally:
            pooled.stop()
            unpooled.stop()
            upstream.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    https(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
