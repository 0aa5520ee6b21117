"""Bounds that need no engine: HTTP framing before reading, connection caps, the relay
store's limits and O(result) listing, the scheduler never hanging, safe output names."""

from __future__ import annotations

import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import make_task

from orchestrator.job.scheduler import Admission, Item, Scheduler
from orchestrator.models.result import FailureMode
from orchestrator.services.httpserve import BackgroundServer, ByteBudget, HttpError, JsonHandler
from orchestrator.services.relay import store as relay_store
from orchestrator.services.relay.store import RelayError, RelayStore
from orchestrator.tasks.load import load_task
from orchestrator.util import check_job_name, write_output


class Echo(JsonHandler):
    def do_POST(self):  # noqa: N802
        try:
            body = self.read_body(1000)
        except Exception as exc:
            self.reply(getattr(exc, "status", 500), {"error": str(exc)})
            return
        self.reply(200, {"bytes": len(body)})


@pytest.fixture
def server():
    srv = BackgroundServer(Echo, "127.0.0.1", max_connections=4).start()
    yield srv
    srv.stop()


def send(srv, raw: bytes) -> str:
    host, port = srv.httpd.server_address[:2]
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(raw)
        return s.recv(200).split(b"\r\n")[0].decode()


@pytest.mark.parametrize("headers, status", [
    (b"Content-Length: -5\r\n", "400"), (b"Content-Length: abc\r\n", "400"),
    (b"Transfer-Encoding: chunked\r\n", "411"), (b"Content-Length: 50000000\r\n", "413"),
    (b"Content-Length: 3\r\n", "200")])
def test_bodies_are_framed_and_sized_before_a_byte_is_read(server, headers, status):
    assert send(server, b"POST / HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\nabc").endswith(
        status + " " + {"400": "Bad Request", "411": "Length Required",
                        "413": "Request Entity Too Large", "200": "OK"}[status])


def test_connections_past_the_cap_get_503_at_once_and_cost_no_thread(server):
    host, port = server.httpd.server_address[:2]
    held = [socket.create_connection((host, port), timeout=5) for _ in range(4)]
    time.sleep(0.3)
    threads = threading.active_count()
    extra = [socket.create_connection((host, port), timeout=5) for _ in range(20)]
    answers = [s.recv(40) for s in extra]
    assert all(a.startswith(b"HTTP/1.1 503") for a in answers)
    assert threading.active_count() <= threads + 1 and server.refused == 20
    for s in held + extra:
        s.close()
    time.sleep(0.3)
    assert send(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").endswith("200 OK")


def test_body_bytes_are_rate_limited_first_by_waiting_then_by_429():
    budget = ByteBudget(rate=1000, burst=2000, max_wait=1.5)
    assert budget.take(2000) == 0  # the burst
    assert budget.take(1000) == pytest.approx(1.0, abs=0.05)  # debt: wait for the refill
    with pytest.raises(HttpError) as refused:
        budget.take(1000)  # would wait ~2 s, past max_wait
    assert refused.value.status == 429 and refused.value.retry_after > 1.5 and budget.refused == 1


def test_a_rate_limited_client_reads_its_429_while_still_sending():
    srv = BackgroundServer(Echo, "127.0.0.1", max_body=1000).start()
    srv.httpd.budget = ByteBudget(rate=10, burst=1000, max_wait=0.1)
    try:
        first = send(srv, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + b"x" * 900)
        second = send(srv, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n" + b"x" * 900)
    finally:
        srv.stop()
    assert first.endswith("200 OK") and second.endswith("429 Too Many Requests")


def test_requests_past_the_servers_rate_wait_then_get_429_before_the_body_is_read():
    srv = BackgroundServer(Echo, "127.0.0.1", max_body=1000, request_rate=25).start()
    assert srv.httpd.requests.rate == 25 and srv.httpd.requests.burst == 50
    srv.httpd.requests = ByteBudget(rate=1, burst=1, max_wait=0.1)
    try:
        first = send(srv, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        second = send(srv, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
    finally:
        srv.stop()
    assert first.endswith("200 OK") and second.endswith("429 Too Many Requests")
    assert srv.httpd.requests.refused == 1


def test_the_relay_store_is_bounded_and_lists_in_o_of_the_result(monkeypatch):
    monkeypatch.setattr(relay_store, "MAX_MESSAGES", 5)
    store = RelayStore("ch")
    lead = store.add_identity("lead", "orchestrator")
    for i in range(5):
        store.post(lead, f"m{i}")
    with pytest.raises(RelayError) as exc:
        store.post(lead, "one too many")
    assert exc.value.status == 429 and "message limit" in str(exc.value)
    for i in range(6000):
        store.write_engram(lead, f"s{i}", "v")
    listed = store.list_engrams(lead)
    assert len(listed) == 1000
    assert store.engram(lead, "s5999").value == "v"


def test_a_callback_that_raises_never_hangs_the_scheduler(tmp_path):
    task = load_task(make_task(tmp_path, "t"))
    cancel = threading.Event()
    cancel.set()  # every attempt goes to on_cancelled, which raises
    scheduler = Scheduler(2, Admission(4, 4096, cancel), cancel)

    def boom(item):
        raise OSError("cannot write the cancelled result")

    outcome = {}

    def run():
        try:
            scheduler.run([Item(task, 0), Item(task, 1)], lambda item: None, boom, lambda r: None)
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and "cannot write" in str(outcome["error"])
    scheduler.stop(timeout=1)


@pytest.mark.parametrize("name, ok", [("nightly-2026.12.02", True), ("../escape", False),
                                      ("a/b", False), ("..", False), ("", False), ("x" * 200, False)])
def test_job_names_are_one_safe_segment(name, ok):
    assert (check_job_name(name) is None) == ok


def test_outputs_never_replace_what_is_not_a_regular_file(tmp_path, capsys):
    fifo_like = tmp_path / "link"
    target = tmp_path / "target.json"
    target.write_text("")
    fifo_like.symlink_to(target)
    write_output(fifo_like, {"a": 1})
    assert fifo_like.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    write_output("-", {"b": 2})
    assert json.loads(capsys.readouterr().out) == {"b": 2}


def test_stop_waits_for_running_attempts_only_not_for_queued_ones(tmp_path):
    """After a cancel, queued attempts are dropped: stop() returns once the running ones
    end, instead of sitting out its whole timeout on futures that will never run."""
    task = load_task(make_task(tmp_path, "t"))
    cancel = threading.Event()
    scheduler = Scheduler(1, Admission(4, 4096, cancel), cancel)
    started = threading.Event()

    def slow(item):
        started.set()
        cancel.wait(10)
        return SimpleNamespace(failure_mode=FailureMode.NONE, not_retried=None)

    def cancelled(item):
        return SimpleNamespace(failure_mode=FailureMode.CANCELLED, not_retried=None)

    raised: list[BaseException] = []

    def run() -> None:
        try:
            scheduler.run([Item(task, i) for i in range(4)], slow, cancelled, lambda r: None)
        except BaseException as exc:  # noqa: BLE001  (the scheduler's own thread must not die)
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    cancel.set()
    began = time.monotonic()
    scheduler.stop(timeout=10)
    # hang guard: stopped, it returns at once; it took the whole 10 s timeout when the three
    # queued futures were never notified
    assert time.monotonic() - began < 5
    # run() itself does not return after stop() (the job's main thread leaves it by its
    # interrupt; the attempts stop() cancelled never report): give it a moment to take the
    # slow attempt's result, which is where its thread once died unseen (AttributeError)
    thread.join(1)
    assert raised == []


def test_an_attempt_submitted_after_stop_is_cancelled_not_raised(tmp_path):
    """A retry's timer can fire while stop() shuts the pool: the attempt comes back as
    cancelled through the results (drain), instead of a RuntimeError in the timer thread."""
    task = load_task(make_task(tmp_path, "t"))
    cancel = threading.Event()
    scheduler = Scheduler(1, Admission(4, 4096, cancel), cancel)
    cancel.set()
    scheduler.stop(timeout=1)
    scheduler._submit(Item(task, 0), lambda item: None, lambda item: f"cancelled {item.attempt}")
    assert [result for _item, result in scheduler.drain()] == ["cancelled 0"]
