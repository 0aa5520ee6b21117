"""The engine watch (a fake probe): outages opened and closed, waits bounded, blame by span."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.job.enginewatch import EngineGone, EngineWatch


class Engine:
    def __init__(self):
        self.down, self.pings = False, 0

    def probe(self) -> str | None:
        self.pings += 1
        return "refused" if self.down else None


def test_an_outage_is_recorded_from_the_first_no_to_the_first_yes():
    engine = Engine()
    watch = EngineWatch(engine.probe, max_wait=10, cancel=threading.Event(), interval=0.01)
    assert watch.answers(fresh=True) and watch.outages == []
    engine.down = True
    time.sleep(0.02)  # past the shared answer's age
    threading.Timer(0.3, lambda: setattr(engine, "down", False)).start()
    started = time.time()
    assert watch.wait() is True
    # it waited for the 0.3 s outage (the lower bounds); the upper ones are hang guards
    assert 0.25 <= time.time() - started < 10
    assert len(watch.outages) == 1 and 0.2 <= watch.down_seconds <= 10


def test_a_wait_past_the_bound_stops_the_job_and_a_cancel_ends_it_quietly():
    engine = Engine()
    engine.down = True
    watch = EngineWatch(engine.probe, max_wait=0.2, cancel=threading.Event(), interval=0.05)
    with pytest.raises(EngineGone, match="has not answered for"):
        watch.wait()
    cancel = threading.Event()
    cancel.set()
    assert EngineWatch(engine.probe, max_wait=10, cancel=cancel, interval=0.05).wait() is False


def test_waiting_threads_share_one_probe_per_interval():
    engine = Engine()
    watch = EngineWatch(engine.probe, max_wait=10, cancel=threading.Event(), interval=5)
    threads = [threading.Thread(target=watch.answers) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.pings == 1


def test_blame_asks_afresh_and_covers_outages_inside_the_span():
    engine = Engine()
    watch = EngineWatch(engine.probe, max_wait=10, cancel=threading.Event(), interval=60)
    assert watch.answers()  # a yes cached for a minute
    engine.down = True
    assert watch.blamed(time.time() - 1, time.time())  # not served the stale yes
    engine.down = False
    assert watch.answers(fresh=True)  # the outage closes
    gone, back = watch.outages[0]
    assert watch.blamed(gone - 5, gone + 0.001) and not watch.blamed(back + 1, back + 2)
