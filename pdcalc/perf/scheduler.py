"""A benchmark run simulated as the client and the engine run it (SimPy): the client sends ``num_prompts``
requests, ``concurrency`` at a time (closed loop) or at ``request_rate`` per second (open loop, Poisson arrivals
from a fixed seed); each DP rank schedules continuous batches under its token budget and sequence cap; the client
reports what ``vllm bench serve`` and SGLang's ``bench_serving`` report: output tokens over the run's duration,
mean TTFT and mean TPOT, ``(latency - TTFT) / (output - 1)`` per request.

Co-located ranks put a chunk of waiting prompts into each step beside their decode batch (chunked prefill);
disaggregated prefill ranks batch whole prompts up to their budget, and each request then waits for its KV
transfer and a decode rank with room. Step times are :mod:`pdcalc.perf.served`'s: ``k`` times the published
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

from pdcalc.perf.served import ServedTables, ServedTerms

#: Seed of the open loop's arrival times (a run is reproducible).
SEED = 20261202
#: Requests a simulation runs at most: a larger ``num_prompts`` is scaled down, keeping concurrency per request.
MAX_SIMULATED = 4096


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
    __slots__ = ("sent", "first", "done", "left")

    def __init__(self, sent: float):
        self.sent, self.first, self.done, self.left = sent, math.nan, math.nan, 0.0


class _Rank:
    """One DP rank: a prefill queue (co-located) and a decode batch, stepping while it has work."""

    def __init__(self, sim: _Sim, *, prefill: bool):
        self.sim, self.prefill = sim, prefill
        self.queue: deque = deque()        # [request, prompt tokens left] waiting for prefill (co-located)
        self.batch: list = []              # requests decoding
        self.wake = sim.env.event()
        self.busy_time = 0.0
        self.batch_time = 0.0
        sim.env.process(self.run())

    def load(self) -> int:
        return len(self.batch) + len(self.queue)

    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def _step_s(self, b: int, chunk: float) -> float:
        s = self.sim
        dec = s.kd * float(np.interp(b, s.t.decode.batch, s.t.decode.decode_s)) if b else 0.0
        pre = s.kp * float(np.interp(chunk, s.t.prefill.chunk_tokens, s.t.prefill.chunk_s)) if chunk else 0.0
        return dec + pre + s.h

    def _advance(self, steps: float) -> None:
        a, now = self.sim.t.emitted, self.sim.env.now
        keep = []
        for r in self.batch:
            r.left -= steps * a
            if r.left <= 1e-9:
                self.sim.finish(r, now)
            else:
                keep.append(r)
        self.batch = keep

    def run(self):
        env, sim = self.sim.env, self.sim
        while True:
            if not self.batch and not self.queue:
                self.wake = env.event()
                yield self.wake
                continue
            b = len(self.batch)
            room = sim.t.prefill.budget - b
            if self.queue and room > 0:                      # a step with a prefill chunk
                chunk = min(room, sum(q[1] for q in self.queue))
                dt = self._step_s(b, chunk)
                yield env.timeout(dt)
                self.busy_time += dt
                self.batch_time += dt * b
                self._advance(1)
                left = chunk
                while left > 1e-9 and self.queue:
                    q = self.queue[0]
                    take = min(left, q[1])
                    q[1] -= take
                    left -= take
                    if q[1] <= 1e-9:
                        self.queue.popleft()
                        sim.first_token(q[0], env.now)
                        self.batch.append(q[0])
                continue
            # decode steps alike until the next finish, or until woken by an arrival
            dt = self._step_s(b, 0.0)
            n = max(1, math.ceil(min(r.left for r in self.batch) / sim.t.emitted - 1e-9))
            self.wake = env.event()
            start = env.now
            yield env.any_of([env.timeout(n * dt), self.wake])
            steps = min(n, math.ceil((env.now - start) / dt - 1e-9))
            if steps * dt > env.now - start + 1e-12:          # finish the step in flight
                yield env.timeout(steps * dt - (env.now - start))
            self.busy_time += steps * dt
            self.batch_time += steps * dt * b
            self._advance(steps)


class _PrefillRank:
    """A disaggregated prefill rank: batches whole prompts up to its budget."""

    def __init__(self, sim: _Sim):
        self.sim = sim
        sim.env.process(self.run())

    def run(self):
        sim, env = self.sim, self.sim.env
        t = sim.t
        while True:
            first = yield sim.prefill_queue.get()
            batch = [first]
            tokens = t.spec.workload.prompt
            while sim.prefill_queue.items and tokens + t.spec.workload.prompt <= max(t.prefill.budget, tokens):
                batch.append((yield sim.prefill_queue.get()))
                tokens += t.spec.workload.prompt
            p = t.prefill
            kernels = (np.interp(tokens, p.chunk_tokens, p.chunk_s) if tokens <= p.budget
                       else tokens / p.budget * p.chunk_s[-1])
            yield env.timeout(sim.kp * float(kernels) + sim.h * max(1.0, tokens / p.budget))
            for r in batch:
                env.process(sim.to_decode(r))


class _Sim:
    def __init__(self, t: ServedTables, terms: ServedTerms, n: int):
        self.t, self.n = t, n
        self.kd, self.kp, self.h = terms.k_decode, terms.k_prefill, terms.host_s
        self.env = simpy.Environment()
        self.done: list[_Req] = []
        self.sent = 0
        w = t.spec.workload
        colo = not t.spec.disaggregated
        self.ranks = [_Rank(self, prefill=colo) for _ in range(t.decode.ranks)]
        if not colo:
            self.prefill_queue = simpy.Store(self.env)
            for _ in range(t.prefill.ranks):
                _PrefillRank(self)
        self.cap = t.decode.max_batch
        self.waiting: deque = deque()           # requests with no rank room yet
        self.scale_factor = 1.0
        if w.concurrency is not None and (w.request_rate is None or w.request_rate == math.inf):
            for _ in range(min(w.concurrency, n)):
                self.send()
        else:
            self.env.process(self.open_loop(w.request_rate))

    def open_loop(self, rate: float):
        rng = np.random.default_rng(SEED)
        while self.sent < self.n:
            self.send()
            if rate != math.inf:
                yield self.env.timeout(float(rng.exponential(1 / rate)))

    def send(self) -> None:
        r = _Req(self.env.now)
        self.sent += 1
        w = self.t.spec.workload
        r.left = float(w.output)
        if self.t.spec.disaggregated:
            self.prefill_queue.put(r)
        else:
            self.waiting.append(r)
            self.admit()

    def admit(self) -> None:
        """Co-located: waiting requests to the least-loaded rank with room under its sequence cap."""
        w = self.t.spec.workload
        while self.waiting:
            rank = min(self.ranks, key=_Rank.load)
            if rank.load() >= self.cap:
                return
            rank.queue.append([self.waiting.popleft(), float(w.prompt)])
            rank.notify()

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
            rank = min(self.ranks, key=_Rank.load)
            if rank.load() >= self.cap:
                return
            r = self.waiting.popleft()
            r.first = self.env.now
            r.left -= 1.0
            rank.batch.append(r)
            rank.notify()

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


def simulate(t: ServedTables, terms: ServedTerms = ServedTerms(), *, num_prompts: int | None = None) -> ClientReport:
    """The client's report of ``t``'s spec under ``terms`` (``num_prompts``: the workload's, else four times
    its concurrency, at most :data:`MAX_SIMULATED`; a larger run is scaled down with its concurrency)."""
    w = t.spec.workload
    n = num_prompts or w.num_prompts or max(4 * (w.concurrency or 1), 64)
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
    tpot = np.array([(r.done - r.first) / (w.output - 1) for r in reqs]) if w.output > 1 else np.zeros(len(reqs))
    busy = sum(rk.busy_time for rk in sim.ranks)
    batch = sum(rk.batch_time for rk in sim.ranks) / busy if busy else 0.0
    return ClientReport(output_tokens_per_s=len(reqs) * w.output / (end - start) / sim.scale_factor,
                        mean_ttft_s=float(ttft.mean()), mean_tpot_s=float(tpot.mean()), duration_s=end - start,
                        completed=len(reqs), mean_batch=batch)


def _scaled(t: ServedTables, terms: ServedTerms, n: int, scale: float) -> _Sim:
    """A run of ``n`` requests on a deployment ``1/scale`` times smaller: ranks and concurrency scaled alike,
    so each rank sees the same load."""
    from dataclasses import replace

    w = t.spec.workload
    ranks_d = max(1, round(t.decode.ranks * scale))
    ranks_p = max(1, round(t.prefill.ranks * scale))
    f = ranks_d / t.decode.ranks
    work = replace(w, concurrency=max(1, round(w.concurrency * f)) if w.concurrency else None,
                   request_rate=w.request_rate * f if w.request_rate not in (None, math.inf) else w.request_rate,
                   num_prompts=max(1, round(n * f)))
    spec = replace(t.spec, workload=work)
    t2 = replace(t, spec=spec, decode=replace(t.decode, ranks=ranks_d),
                 prefill=replace(t.prefill, ranks=ranks_p if t.spec.disaggregated else ranks_d))
    sim = _Sim(t2, terms, work.num_prompts)
    sim.scale_factor = f
    return sim
