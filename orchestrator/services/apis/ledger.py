"""A trial's model budget as a ledger that holds to the token (DESIGN 3.3).

Every call is admitted against what is left after what the calls in flight have reserved:

- its input, bounded from above before it is sent: the request's bytes (no tokenizer the
  proxy's upstreams use makes a token of less than one byte, and the JSON around each
  message outweighs the chat template's own tokens) plus a margin for a template's tool
  preamble (`input_bound`);
- its output cap, lowered to what is left once the input is reserved: the cap sent upstream.

A call that would fit once the calls in flight settle waits for them (bounded by the trial's
deadline and the agent's patience); one that cannot fit even then is refused. Usage read from
the upstream settles the reservation. An answer without usage is charged at its upper bound
(input bound, one token a byte of output up to its cap) so the ceiling holds, and recorded as
estimated (~4 bytes a token), never as counted. Cost likewise: per call from the counted
usage and the model's prices; a call whose usage or price is unknown adds no dollars to the
cost (`cost_unknown_calls` says so), while a cost budget charges its upper bound.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.models import Budget, ProxyCounts
from orchestrator.services.apis.common import Usage

TOOLS_MARGIN = 512  # tokens a chat template may add around the tools it is given
MESSAGE_MARGIN = 64  # and around the conversation (a default system prompt, the reply's head)
# an output cap forwarded when no budget bounds it: a call asking for more gets this (an
# agent's max_tokens of 10^12 is not a request any server should be sent)
MAX_OUTPUT = 262_144
WAIT_STEP_SEC = 0.5


def input_bound(size: int, tools: bool) -> int:
    """An upper bound on the prompt tokens a request of `size` bytes can be."""
    return size + MESSAGE_MARGIN + (TOOLS_MARGIN if tools else 0)


@dataclass
class Reservation:
    """What one admitted call holds until it settles."""

    input: int
    output: int  # the output cap sent upstream (None asked and no budget: MAX_OUTPUT)
    cost: float
    settled: bool = False


class Refused(Exception):
    """The budget cannot admit the call (its reason)."""


class Ledger:
    """The budget of one trial's proxy: reservations of the calls in flight, and what the
    settled calls spent (into `stats`, the proxy's counts)."""

    def __init__(self, budget: Budget, prices: dict[str, float], stats: ProxyCounts, lock: threading.Lock):
        self.budget, self.prices, self.stats = budget, prices, stats
        self._lock = lock
        self._settled = threading.Condition(lock)
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.in_flight = 0

    @property
    def priced(self) -> bool:
        return "input" in self.prices or "output" in self.prices

    def cost_of(self, tokens_in: int, tokens_out: int) -> float:
        """Dollars for these tokens at the model's prices (0 where it has none)."""
        return (tokens_in * self.prices.get("input", 0.0) + tokens_out * self.prices.get("output", 0.0)) / 1e6

    def _fit(self, bound: int, asked: int | None, with_in_flight: bool) -> int | str:
        """The output cap this call gets now (an int), or why it cannot (a str)."""
        b, s = self.budget, self.stats
        calls = s.calls if with_in_flight else s.calls - self.in_flight  # s.calls: every call admitted
        if b.max_calls is not None and calls >= b.max_calls:
            return f"max_calls={b.max_calls} reached"
        cap = min(asked or MAX_OUTPUT, MAX_OUTPUT)
        if b.tokens is not None:
            left = b.tokens - s.budget_charged_tokens - (self.reserved_tokens if with_in_flight else 0)
            if bound + 1 > left:
                return (f"tokens={b.tokens}: {max(0, left)} left"
                        + (" after the calls in flight" if with_in_flight and self.in_flight else "")
                        + f", this call's input may be up to {bound} tokens")
            cap = min(cap, left - bound)
        if b.cost is not None:
            if not self.priced:
                return f"cost={b.cost}: no price is known for this model (set prices in the manifest " \
                       "or the endpoint config)"
            left_cost = b.cost - s.budget_charged_cost - (self.reserved_cost if with_in_flight else 0.0)
            out_price = self.prices.get("output", 0.0)
            room = left_cost - self.cost_of(bound, 0)
            if room < out_price / 1e6 or left_cost <= 0:
                return f"cost={b.cost}: ${max(0.0, left_cost):.6f} left, this call may cost more"
            if out_price > 0:
                cap = min(cap, math.floor(room * 1e6 / out_price))
        return max(1, cap)

    def admit(self, bound: int, asked: int | None, deadline: float,
              gone: Callable[[], bool] = lambda: False) -> Reservation:
        """Reserve the call's input bound and output cap, waiting while only the calls in
        flight stand in the way; raises Refused."""
        with self._lock:
            while True:
                now = self._fit(bound, asked, with_in_flight=True)
                if isinstance(now, int):
                    break
                alone = self._fit(bound, asked, with_in_flight=False)
                if isinstance(alone, str) or not self.in_flight or time.time() >= deadline or gone():
                    self.stats.refused_budget += 1
                    raise Refused(now)
                self._settled.wait(WAIT_STEP_SEC)
            reservation = Reservation(bound, now, self.cost_of(bound, now))
            self.stats.calls += 1
            self.in_flight += 1
            self.reserved_tokens += reservation.input + reservation.output
            self.reserved_cost += reservation.cost
            return reservation

    def settle(self, reservation: Reservation, usage: Usage | None, sent_bytes: int = 0,
               answer_bytes: int = 0) -> Usage:
        """Release the reservation and charge what the call spent: `usage` as the upstream
        counted it, or (None) an estimate recorded as such and charged at its upper bound.
        Returns the usage recorded."""
        with self._lock:
            if not self._give_back(reservation):
                return Usage()
            s = self.stats
            if usage is not None:
                s.counted_prompt_tokens += usage.input
                s.counted_completion_tokens += usage.output
                s.usage_counted_calls += 1
                charged_in, charged_out = usage.input, usage.output
                if self.priced:
                    s.cost += self.cost_of(usage.input, usage.output)
                else:
                    s.cost_unknown_calls += 1
                recorded = usage
            else:
                recorded = Usage(max(1, sent_bytes // 4), math.ceil(max(0, answer_bytes) / 4))
                s.estimated_prompt_tokens += recorded.input
                s.estimated_completion_tokens += recorded.output
                s.usage_estimated_calls += 1
                s.cost_unknown_calls += 1
                # upper bounds: the input's, and of the output a token a byte, at most its cap
                charged_in, charged_out = reservation.input, min(answer_bytes, reservation.output)
            s.prompt_tokens += recorded.input
            s.completion_tokens += recorded.output
            s.budget_charged_tokens += charged_in + charged_out
            s.budget_charged_cost += self.cost_of(charged_in, charged_out)
            self._settled.notify_all()
            return recorded

    def release(self, reservation: Reservation) -> None:
        """A call that generated nothing (refused upstream, never sent): its reservation back."""
        with self._lock:
            if self._give_back(reservation):
                self._settled.notify_all()

    def _give_back(self, reservation: Reservation) -> bool:
        """The reservation's hold released, once (the lock held); False: it was already."""
        if reservation.settled:
            return False
        reservation.settled = True
        self.in_flight -= 1
        self.reserved_tokens -= reservation.input + reservation.output
        self.reserved_cost -= reservation.cost
        return True
