"""A benchmark run simulated as the client and the engine run it (SimPy): the client sends ``num_prompts``
requests, ``concurrency`` at a time (closed loop) or at ``request_rate`` per second (open loop, Poisson arrivals
from a fixed seed); each DP rank schedules continuous batches under its token budget and sequence cap; the client
reports what ``vllm bench serve`` and SGLang's ``bench_serving`` report: output tokens over the run's duration,
mean TTFT and mean TPOT, ``(latency - TTFT) / (output - 1)`` per request.

The DP ranks of one instance step together: the MoE layers of a step span them all (expert parallel, or
SGLang's DP attention beside a tensor-parallel MoE), so a step lasts as long as its slowest rank's and a rank
with nothing to do runs an empty one. Co-located ranks schedule prefill as their engine does
(:data:`pdcalc.layout.served.SERVING_ENGINES`): a chunk of waiting prompts beside the decode batch within the
token budget (``mixed``), or a step of waiting prompts on its own while the decode batch waits
(``prefill-first``). SGLang's prefill delayer (``prefill_delay_passes``) holds a rank's waiting prompts, the
ranks decoding meanwhile, until every rank of the instance has prompts to prefill or the passes run out; once
every rank has, it holds them, with no limit on passes, until the fullest rank has as many free request slots as
the most requests a rank has yet prefilled in one step.
Disaggregated prefill ranks batch whole prompts up to their budget and sequence cap, and each request then waits
for its KV transfer and a decode rank with room. A request reaches the engine's scheduler ``request_s`` after
the client sends it (:data:`pdcalc.perf.served.REQUEST_SOURCES`): its TTFT includes that time, and a closed
loop's slot is held through it. Request lengths are the stated ones or
drawn as the client draws them, from its seed (``min_length_ratio``, ``seed``). Step times are :mod:`pdcalc.perf.served`'s: ``k`` times the published
kernel time plus a host time per step. Between two events (a request arriving or finishing) a rank's decode
steps are alike, so they advance in one timeout; a run's events grow with its requests, not its tokens.

The steady state of :func:`pdcalc.perf.served.steady_state` is this simulation's long-run limit; the simulation
is what a run of few prompts, a single wave of requests or a ramp-up and tail measure.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import simpy

from pdcalc.layout.served import client_lengths
from pdcalc.perf.served import ServedTables, ServedTerms, chunk_s, role_dp

#: Seed of the open loop's arrival times (a run is reproducible).
SEED = 20261202
#: Requests a simulation runs at most: a larger ``num_prompts`` is scaled down, keeping concurrency per request.
MAX_SIMULATED = 4096
#: At most this many prompt chunks are simulated (a prompt far over the token budget is many steps each).
MAX_STEPS = 262_144


@dataclass(frozen=True)
class ClientReport:
    """What the benchmark client prints for one simulated run."""

    output_tokens_per_s: float
    mean_ttft_s: float
    mean_tpot_s: float
    duration_s: float
    completed: int
    mean_batch: float               # sequences decoding per rank, time-averaged over busy ranks


class _Req:
    __slots__ = ("sent", "first", "done", "left", "prompt", "out")

    def __init__(self, sent: float, prompt: float, out: float):
        self.sent, self.first, self.done = sent, math.nan, math.nan
        self.prompt, self.out, self.left = prompt, out, out


class _Lane:
    """One DP rank's work: prompts waiting for prefill (co-located) and the sequences it decodes."""

    __slots__ = ("inst", "queue", "batch")

    def __init__(self, inst: _Instance):
        self.inst = inst
        self.queue: deque = deque()        # [request, prompt tokens left]
        self.batch: list = []

    def load(self) -> int:
        return len(self.batch) + len(self.queue)


def _requests_in(queue, chunk: float) -> int:
    """Requests of a rank's waiting ``queue`` a prefill step of ``chunk`` tokens takes (the last in part)."""
    n, left = 0, chunk
    for q in queue:
        if left <= 1e-9:
            break
        n += 1
        left -= q[1]
    return n


class _Delayer:
    """SGLang's prefill delayer on one instance (``PrefillDelayer._negotiate_should_allow_prefill``, sglang 0.5.15):
    ``passes`` is the launch's ``prefill_delay_passes``."""

    def __init__(self, passes: int):
        self.passes = passes
        self.delayed = 0                    # passes it has held waiting prompts so far
        self.max_prefill_bs = 0             # most requests a rank has prefilled in one step so far
        self.skipped_first = False          # its first slot wait is let pass (skip_first_delayer)

    def prefilled(self, requests: int) -> None:
        """A rank prefilled ``requests`` requests in one step."""
        self.max_prefill_bs = max(self.max_prefill_bs, requests)

    def held(self, lanes, plans: list[tuple[int, float]], cap: float) -> float:
        """Passes it still holds the waiting prompts (0: they run now; ``inf``: until a request finishes), while
        some rank has sequences to decode; ``cap``: a rank's running requests at most.

        - some ranks, not all, have prompts to prefill ("mixed"): held for at most ``passes`` passes in a row,
          then allowed ("wait_timeout");
        - every rank has ("all"): held while the fullest rank's free request slots are fewer than the most
          requests a rank has prefilled in one step so far ('slot_condition = max_running_requests -
          global_running_batch_max < global_max_prefill_bs_max'), with no limit on passes, except the first
          time (``skip_first_delayer``)."""
        waiting = sum(1 for _, chunk in plans if chunk)
        if waiting == 0 or not any(ln.batch for ln in lanes):
            self.delayed = 0
            return 0
        if waiting == len(plans):
            if cap - max(len(ln.batch) for ln in lanes) < self.max_prefill_bs:
                if self.skipped_first:
                    return math.inf
                self.skipped_first = True
            self.delayed = 0
            return 0
        left = self.passes - 1 - self.delayed
        if left <= 0:
            self.delayed = 0
        return max(left, 0)


class _Instance:
    """One instance of the serving role: its DP ranks step together (the MoE layers of one step span them all,
    so a step lasts as long as its slowest rank's, and a rank with nothing to do runs an empty step)."""

    def __init__(self, sim: _Sim, dp: int):
        self.sim = sim
        self.lanes = [_Lane(self) for _ in range(dp)]
        self.wake = sim.env.event()
        self.busy_time = 0.0
        self.batch_time = 0.0
        serve = sim.t.spec.serve
        passes = serve.prefill_delay_passes if serve is not None and dp > 1 else None
        self.delayer = _Delayer(passes) if passes else None
        sim.env.process(self.run())

    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def _step_s(self, b: int, chunk: float) -> float:
        s = self.sim
        dec = s.kd * float(np.interp(b, s.t.decode.batch, s.t.decode.decode_s)) if b else 0.0
        pre = s.kp * float(chunk_s(s.t.prefill, chunk, mixed=b > 0)) if chunk else 0.0
        return dec + pre + s.h

    def _advance(self, lane: _Lane, steps: float) -> None:
        a, now = self.sim.t.emitted, self.sim.env.now
        keep = []
        for r in lane.batch:
            r.left -= steps * a
            if r.left <= 1e-9:
                self.sim.finish(r, now)
            else:
                keep.append(r)
        lane.batch = keep

    def _plan(self, lane: _Lane) -> tuple[int, float]:
        """What a rank runs in the next step: sequences decoding and prompt tokens prefilled."""
        sim = self.sim
        b = len(lane.batch)
        first = sim.t.schedule == "prefill-first"
        room = sim.t.prefill.budget - (0 if first else b)
        if lane.queue and room > 0:
            chunk = min(room, sum(q[1] for q in lane.queue))
            return (0 if first else b), chunk
        return b, 0.0

    def _prefilled(self, lane: _Lane, chunk: float) -> None:
        sim, now = self.sim, self.sim.env.now
        left = chunk
        while left > 1e-9 and lane.queue:
            q = lane.queue[0]
            take = min(left, q[1])
            q[1] -= take
            left -= take
            if q[1] <= 1e-9:
                lane.queue.popleft()
                sim.first_token(q[0], now)
                if q[0].left > 1e-9:
                    lane.batch.append(q[0])

    def run(self):
        env, sim = self.sim.env, self.sim
        while True:
            if not any(ln.batch or ln.queue for ln in self.lanes):
                self.wake = env.event()
                yield self.wake
                continue
            plans = [self._plan(ln) for ln in self.lanes]
            held = self.delayer.held(self.lanes, plans, sim.cap) if self.delayer else 0
            if held:                                         # every rank decodes; the prompts wait
                plans = [(len(ln.batch), 0.0) for ln in self.lanes]
            if any(chunk for _, chunk in plans):             # a step with prefill on some rank
                dt = max(self._step_s(b, chunk) for b, chunk in plans)
                yield env.timeout(dt)
                self.busy_time += dt
                for ln, (b, chunk) in zip(self.lanes, plans):
                    self.batch_time += dt * b
                    if b:
                        self._advance(ln, 1)
                    if chunk:
                        if self.delayer:
                            self.delayer.prefilled(_requests_in(ln.queue, chunk))
                        self._prefilled(ln, chunk)
                continue
            # decode steps alike on every rank until the next finish, or until woken by an arrival
            dt = max(self._step_s(b, 0.0) for b, _ in plans)
            n = max(1, math.ceil(min(r.left for ln in self.lanes for r in ln.batch) / sim.t.emitted - 1e-9))
            if held:
                n = min(n, held)
            self.wake = env.event()
            start = env.now
            yield env.any_of([env.timeout(n * dt), self.wake])
            steps = min(n, math.ceil((env.now - start) / dt - 1e-9))
            if steps * dt > env.now - start + 1e-12:          # finish the step in flight
                yield env.timeout(steps * dt - (env.now - start))
            self.busy_time += steps * dt
            if held:
                self.delayer.delayed += steps
            for ln, (b, _) in zip(self.lanes, plans):
                self.batch_time += steps * dt * b
                self._advance(ln, steps)


class _PrefillRank:
    """A disaggregated prefill rank: batches whole prompts up to its budget and its sequence cap."""

    def __init__(self, sim: _Sim):
        self.sim = sim
        sim.env.process(self.run())

    def run(self):
        sim, env = self.sim, self.sim.env
        t = sim.t
        while True:
            first = yield sim.prefill_queue.get()
            batch = [first]
            tokens = first.prompt
            while (sim.prefill_queue.items and tokens + sim.prefill_queue.items[0].prompt <= t.prefill.budget
                   and len(batch) < t.prefill.max_batch):
                nxt = yield sim.prefill_queue.get()
                batch.append(nxt)
                tokens += nxt.prompt
            p = t.prefill
            yield env.timeout(sim.kp * float(chunk_s(p, tokens, mixed=False)) + sim.h_p * max(1.0, tokens / p.budget))
            for r in batch:
                env.process(sim.to_decode(r))


class _Sim:
    def __init__(self, t: ServedTables, terms: ServedTerms, n: int):
        self.t, self.n = t, n
        self.kd, self.kp, self.delta = terms.k_decode, terms.k_prefill, terms.request_s
        # host seconds per step of the decode (co-located: serving) ranks and of the disaggregated prefill ranks;
        # the spec's DP, which a scaled-down run keeps
        self.h, self.h_p = terms.host_for(role_dp(t.spec, "decode")), terms.host_for(role_dp(t.spec, "prefill"))
        self.env = simpy.Environment()
        self.done: list[_Req] = []
        self.sent = 0
        w = t.spec.workload
        colo = not t.spec.disaggregated
        dp = max(1, min(t.decode.dp, t.decode.ranks))
        self.instances = [_Instance(self, dp) for _ in range(max(1, t.decode.ranks // dp))]
        self.lanes = [ln for inst in self.instances for ln in inst.lanes]
        if not colo:
            self.prefill_queue = simpy.Store(self.env)
            for _ in range(t.prefill.ranks):
                _PrefillRank(self)
        self.cap = t.decode.max_batch
        self.waiting: deque = deque()           # requests with no rank room yet
        self.scale_factor = 1.0
        self.drawn: list | None = None          # the client's lengths, drawn once (random lengths)
        self.slot = None                        # an open loop's wait for a concurrency slot
        if w.concurrency is not None and (w.request_rate is None or w.request_rate == math.inf):
            for _ in range(min(w.concurrency, n)):
                self.send()
        else:
            self.env.process(self.open_loop(w.request_rate))

    def open_loop(self, rate: float):
        """Arrivals at ``rate`` (Poisson); with a concurrency as well, an arrival waits for one of its slots
        and is timed from when it is sent (``--max-concurrency`` beside ``--request-rate``)."""
        rng = np.random.default_rng(SEED)
        cap = self.t.spec.workload.concurrency
        while self.sent < self.n:
            while cap is not None and self.sent - len(self.done) >= cap:
                self.slot = self.env.event()
                yield self.slot
            self.send()
            if rate != math.inf:
                yield self.env.timeout(float(rng.exponential(1 / rate)))

    def lengths(self, w) -> tuple[float, float]:
        """A request's prompt and output tokens: the stated ones, or the next the client drew
        (:func:`pdcalc.layout.served.client_lengths`)."""
        if w.min_length_ratio >= 1.0:
            return float(w.prompt), float(w.output)
        if self.drawn is None:
            self.drawn = client_lengths(w, self.n)
        p, o = self.drawn[self.sent % len(self.drawn)]
        return float(p), float(o)

    def send(self) -> None:
        """The client sends a request; it reaches the engine's scheduler ``request_s`` later."""
        w = self.t.spec.workload
        r = _Req(self.env.now, *self.lengths(w))
        self.sent += 1
        if self.delta > 0:
            self.env.process(self.reach(r))
        else:
            self.enter(r)

    def reach(self, r: _Req):
        yield self.env.timeout(self.delta)
        self.enter(r)

    def enter(self, r: _Req) -> None:
        if self.t.spec.disaggregated:
            self.prefill_queue.put(r)
        else:
            self.waiting.append(r)
            self.admit()

    def admit(self) -> None:
        """Co-located: waiting requests to the least-loaded rank with room under its sequence cap."""
        while self.waiting:
            lane = min(self.lanes, key=_Lane.load)
            if lane.load() >= self.cap:
                return
            r = self.waiting.popleft()
            lane.queue.append([r, r.prompt])
            lane.inst.notify()

    def first_token(self, r: _Req, now: float) -> None:
        r.first = now
        r.left -= 1.0
        if r.left <= 1e-9:
            self.finish(r, now)

    def to_decode(self, r: _Req):
        yield self.env.timeout(self.t.transfer_s)
        self.waiting.append(r)
        self.place()

    def place(self) -> None:
        while self.waiting:
            lane = min(self.lanes, key=_Lane.load)
            if lane.load() >= self.cap:
                return
            r = self.waiting.popleft()
            r.first = self.env.now
            r.left -= 1.0
            lane.batch.append(r)
            lane.inst.notify()

    def finish(self, r: _Req, now: float) -> None:
        r.done = now
        self.done.append(r)
        w = self.t.spec.workload
        if self.t.spec.disaggregated:
            self.place()
        else:
            self.admit()
        if w.concurrency is not None and (w.request_rate is None or w.request_rate == math.inf) \
                and self.sent < self.n:
            self.send()
        elif self.slot is not None and not self.slot.triggered:
            self.slot.succeed()


def simulate(t: ServedTables, terms: ServedTerms = ServedTerms(), *, num_prompts: int | None = None) -> ClientReport:
    """The client's report of ``t``'s spec under ``terms`` (``num_prompts``: the workload's, else four times
    its concurrency, at most :data:`MAX_SIMULATED`; a larger run is scaled down with its concurrency)."""
    w = t.spec.workload
    n = num_prompts or w.num_prompts or max(4 * (w.concurrency or 1), 64)
    # a prompt far over the token budget is many steps: fewer requests keep the run to MAX_STEPS steps
    chunks = max(1, math.ceil(w.prompt / max(1, t.prefill.budget)))
    n = max(1, min(n, MAX_STEPS // chunks))
    scale = 1.0
    if n > MAX_SIMULATED:
        scale = MAX_SIMULATED / n
    sim = _Sim(t, terms, n) if scale == 1.0 else _scaled(t, terms, n, scale)
    sim.env.run()
    reqs = sim.done
    if not reqs:
        return ClientReport(math.nan, math.nan, math.nan, math.nan, 0, math.nan)
    start = min(r.sent for r in reqs)
    end = max(r.done for r in reqs)
    ttft = np.array([r.first - r.sent for r in reqs])
    many = [r for r in reqs if r.out > 1]              # the clients time TPOT over requests of 2+ tokens
    tpot = np.array([(r.done - r.first) / (r.out - 1) for r in many]) if many else np.zeros(1)
    busy = sum(inst.busy_time for inst in sim.instances) * max(1, len(sim.lanes) // len(sim.instances))
    batch = sum(inst.batch_time for inst in sim.instances) / busy if busy else 0.0
    return ClientReport(output_tokens_per_s=sum(r.out for r in reqs) / (end - start) / sim.scale_factor,
                        mean_ttft_s=float(ttft.mean()), mean_tpot_s=float(tpot.mean()), duration_s=end - start,
                        completed=len(reqs), mean_batch=batch)


def _scaled(t: ServedTables, terms: ServedTerms, n: int, scale: float) -> _Sim:
    """A run of ``n`` requests on a deployment ``1/scale`` times smaller: ranks and concurrency scaled alike,
    so each rank sees the same load."""
    from dataclasses import replace

    w = t.spec.workload
    inst_d = t.decode.ranks // t.decode.dp
    if inst_d > 1:                          # fewer instances of the same size
        ranks_d = max(1, round(inst_d * scale)) * t.decode.dp
        dp_d = t.decode.dp
    else:                                   # one instance: fewer ranks in it
        ranks_d = dp_d = max(1, round(t.decode.ranks * scale))
    ranks_p = max(1, round(t.prefill.ranks * scale))
    f = ranks_d / t.decode.ranks
    work = replace(w, concurrency=max(1, round(w.concurrency * f)) if w.concurrency else None,
                   request_rate=w.request_rate * f if w.request_rate not in (None, math.inf) else w.request_rate,
                   num_prompts=min(MAX_SIMULATED, max(1, round(n * f))))   # one rank is as small as it gets
    spec = replace(t.spec, workload=work)
    t2 = replace(t, spec=spec, decode=replace(t.decode, ranks=ranks_d, dp=dp_d),
                 prefill=replace(t.prefill, ranks=ranks_p if t.spec.disaggregated else ranks_d,
                                 dp=t.prefill.dp if t.spec.disaggregated else dp_d))
    sim = _Sim(t2, terms, work.num_prompts)
    sim.scale_factor = f
    return sim
