"""The discrete-event loop: arrivals -> router policy -> engines -> (KV link) -> decode.

Deterministic by construction: a virtual clock, one heap ordered by (time, time pushed,
sequence number) so equal times resolve in insertion order, no wall clock, no unseeded
randomness, and no iteration over hash-ordered sets. Same inputs, same result.

Life of a request: the live router's scheduler (pdserve.router.core.scheduler, built
from ``config.routing``) places it, exactly as in production.
* colocated / chunked: placed on an engine; TTFT when its first token lands, TPOT
  from its last.
* disagg, P/D: placed on a prefill engine (``hold_kv``, 1 token); when the prefill lands,
  the scheduler picks a decode engine (like vLLM's proxy, which sends the
  decode request after the prefill response), the KV not already cached there moves
  over both instances' links, then the decode engine adds the request as
  ``remote_prefilled`` and the prefill side releases its blocks. If the prefill
  side's lease expired first, decode recomputes the prompt (vLLM's ``recompute``
  kv_load_failure_policy). The client's first token is the decode engine's first.
* disagg, local (no prefill engine ready, or fewer uncached tokens than the spec's
  ``disagg_threshold_tokens``): the decode engine prefills it itself.
* a TTFT SLO in ``config.routing.admission`` refuses requests as the live router does
  (counted in ``rejected``, with the verdict as the record's error).

Host and network time (optional, 0 by default): ``ingress_s`` delays each request's
arrival at the router's decision and the engine (its HTTP hops), ``pd_handoff_s``
delays the decode side's choice and KV pull after a prefill (the prefill response
through the router, the decode request, the side-channel round trip), and
``step_host_s`` lengthens every engine step (host time between steps beyond the
profile's own per-step overhead). All are wall-clock costs of a real deployment;
bench/sim/hop_probe.py measures them on the live mock stack.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from pdserve.router.core.scheduler import Mode, PoolViews, Scheduler
from pdserve.router.policies import Decision, Policy, RouteRequest, WorkerView
from pdserve.sim.autoscale import Autoscaler, ScalingEvent
from pdserve.sim.coast import end_coast, reach, settle_coasts, start_coast
from pdserve.sim.config import SimConfig, SimConfigError
from pdserve.sim.scaling import first_tick
from pdserve.sim.events import (  # module globals, not ev.X: the event loop reads them per event
    COAST_DONE as _COAST_DONE, DISPATCH as _DISPATCH, HANDOFF as _HANDOFF, KICK as _KICK, KV_DONE as _KV_DONE,
    KV_EVENTS as _KV_EVENTS, READY as _READY, SCRAPE as _SCRAPE, STEP_DONE as _STEP_DONE, TICK as _TICK,
)
from pdserve.sim.instance import Instance, PoolSpec, State, pool_spec
from pdserve.common.kvlink import schedule_transfer
from pdserve.sim.metrics import RequestRecord, sorted_samples
from pdserve.sim.outcome import SimResult, collect_result
from pdserve.sim.prompts import KeyIds, block_keys
from pdserve.sim.router_view import RouterView
from pdserve.sim.scaling import apply_tick
from pdserve.sim.traces import Trace, default_block_size
from pdserve.sim.windows import WindowTracker
from pdserve.worker.decode_run import plain_steps
from pdserve.worker.engine import StepOutput

# read per event; Python 3.11's EnumType has a __getattr__, so `State.READY` costs ~5x a module global
_IS_READY, _IS_RELEASED, _PD_MODE = State.READY, State.RELEASED, Mode.PD


@dataclass(slots=True)
class _Req:
    rec: RequestRecord
    keys: list[int]
    last_token_s: float = -1.0
    prefill_start_s: float = 0.0  # disagg: start of the prefill's last step (layer-wise transfer overlap)
    prefill_sent_s: float = 0.0  # disagg: when the request reached its prefill engine
    prefill: Instance | None = None
    decode: Instance | None = None
    route: RouteRequest | None = None
    mode: Mode = Mode.COLOCATED
    decode_policy: Policy | None = None  # the policy that placed (and tracks) its decode side


class Simulation:
    def __init__(
        self,
        trace: Trace,
        config: SimConfig,
        *,
        autoscaler: Autoscaler | None = None,
        progress: Callable[[int, int], None] | None = None,
        coast_decode: bool = True,
    ) -> None:
        """``coast_decode=False`` makes every engine step its own event (see pdserve.sim.coast; the results
        are the same, only slower: tests compare the two)."""
        # Resolved here, not only in run_simulation: Simulation(trace, SimConfig()) must run too,
        # with the engines' blocks (pool_spec) and the prompts' keys on the same block size.
        self.block_size: int = config.block_size if config.block_size is not None else default_block_size(trace)
        config = config.model_copy(update={"block_size": self.block_size})
        self.trace = trace
        self.cfg = config
        self.autoscaler = autoscaler
        self.progress = progress
        self.disagg = config.topology == "disagg"
        pools = ("prefill", "decode") if self.disagg else ("colocated",)
        self.specs: dict[str, PoolSpec] = {p: pool_spec(config, p) for p in pools}
        self.entry_pool = "prefill" if self.disagg else "colocated"
        # The router hashes prompts in the engines' block size, as the operator configures it.
        self.scheduler = Scheduler(replace(config.routing, block_size=self.block_size))
        self.router_view = RouterView(config, self.scheduler.index)
        # read on every step with KV events: the spec is fixed, so its property is evaluated once
        self.uses_prefixes = self.scheduler.uses_prefixes
        self.instances: dict[str, list[Instance]] = {p: [] for p in pools}
        self.pending: dict[str, deque[_Req]] = {p: deque() for p in pools}
        # (time, time pushed, sequence number, kind, object): the push time orders equal times as the push
        # order does (it only grows), and lets a coast's steps (pdserve.sim.coast) keep their place
        self.heap: list[tuple[float, float, int, int, object]] = []
        self.current: tuple[float, float, int, int, object] | None = None  # the event being handled (None: an arrival)
        self.seq = 0
        self.now = 0.0
        self.states: dict[str, _Req] = {}
        self.records: list[RequestRecord] = []
        # Inter-token gaps (all of them: metrics.sorted_samples): single samples, and gaps of coasted steps that k
        # requests share, each k samples (numpy converts list elements one by one; array("d") is slower still)
        self.itl: list[float] = []
        self.itl_repeats: dict[int, list[float]] = {}
        self.key_ids = KeyIds()  # prompt block keys as small ints
        self.outstanding = 0
        self.kv_recomputes = 0
        self.rejected = 0
        self.steps = 0
        self.step_host_s = config.step_host_s
        self.coast_decode = coast_decode
        self.coasted_until = -math.inf  # end of the last step run inside a coast (the clock's reach)
        self.coasted_steps = 0  # engine steps run inside coasts (included in steps)
        self.next_arrival_s = math.inf  # the run loop's next arrival (where a colocated engine's coast ends)
        self.scaling_events: list[ScalingEvent] = []
        self.all_instances: list[Instance] = []
        self.by_id: dict[str, Instance] = {}
        self.counter = {p: 0 for p in pools}
        self.windows = WindowTracker(self)
        initial = ({"prefill": config.prefill_instances, "decode": config.decode_instances} if self.disagg
                   else {"colocated": config.instances})
        for pool, n in initial.items():
            for _ in range(n):
                self.new_instance(pool, ready_at=0.0)
        self.static_gpus = sum(i.tp for i in self.all_instances)

    # ---- plumbing -------------------------------------------------------------
    def _push(self, t: float, kind: int, obj: object) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.now, self.seq, kind, obj))

    def new_instance(self, pool: str, ready_at: float) -> Instance:
        spec = self.specs[pool]
        prefix = {"colocated": "C", "prefill": "P", "decode": "D"}[pool]
        iid = f"{prefix}{self.counter[pool]}"
        self.counter[pool] += 1
        inst = Instance.create(iid, spec, self.cfg.kv_link_gbps, self.now, ready_at)
        self.instances[pool].append(inst)
        self.all_instances.append(inst)
        self.by_id[iid] = inst
        if inst.state is State.STARTING:
            self._push(ready_at, _READY, inst)
        return inst

    def ready(self, pool: str) -> list[Instance]:
        return [i for i in self.instances[pool] if i.state is _IS_READY]

    def _kick(self, inst: Instance) -> None:
        if not inst.busy and not inst.kicked:
            inst.kicked = True
            self._push(self.now, _KICK, inst)

    def _views(self, pool: str) -> list[WorkerView]:
        return self.router_view.views(self.ready(pool))

    def _instance(self, pool: str, d: Decision) -> Instance:
        inst = self.by_id[d.worker_id]  # ids are unique across pools (C0, P0, D0)
        assert inst.pool == pool
        return inst

    def _dispatch_entry(self, st: _Req) -> None:
        rec = st.rec
        rid = str(rec.index)
        if st.route is None:
            st.route = RouteRequest(request_id=rid, token_ids=(), block_hashes=st.keys, prompt_tokens=rec.input_tokens)
        req = st.route
        decode_pool = "decode" if self.disagg else "colocated"
        views = PoolViews(decode=self._views(decode_pool), prefill=self._views("prefill") if self.disagg else None)
        plan = self.scheduler.plan(req, views, self.now)
        st.mode = plan.mode
        pool, d = ("prefill", plan.prefill) if plan.mode is _PD_MODE else (decode_pool, plan.decode)
        if d is None:  # no engine up yet (autoscaling from zero): wait for one
            self.pending[decode_pool].append(st)
            return
        policy = self.scheduler.policy_of("prefill" if pool == "prefill" else "decode", plan.mode)
        if not plan.admitted:
            assert plan.verdict is not None
            self._refuse(st, f"admission: predicted TTFT {plan.verdict.predicted_ttft_s * 1000:.0f} ms")
            return
        inst = self._instance(pool, d)
        if inst.coast is not None:
            reach(self, inst)  # its steps so far happen before the request reaches it
        self.scheduler.on_routed(policy, d, req, self.now)
        rec.cached_tokens = inst.cached_prefix_blocks(st.keys, rec.input_tokens) * self.block_size
        try:
            if plan.mode is _PD_MODE:
                st.prefill, st.prefill_sent_s = inst, self.now
                rec.prefill_instance = inst.instance_id
                inst.add(rid, rec.input_tokens, 1, st.keys, self.now, hold_kv=True)
            else:
                st.decode, st.decode_policy = inst, policy
                rec.decode_instance = inst.instance_id
                inst.add(rid, rec.input_tokens, rec.output_tokens, st.keys, self.now)
        except ValueError as e:
            self._reject(st, inst, policy, e)
            return
        self._kick(inst)

    def _refuse(self, st: _Req, why: str) -> None:
        st.rec.error = why
        self.states.pop(str(st.rec.index), None)
        self.outstanding -= 1
        self.rejected += 1

    def _reject(self, st: _Req, inst: Instance, policy: Policy, err: ValueError) -> None:
        # The engine refused it (too long for max_model_len / KV): vLLM answers 400.
        rid = str(st.rec.index)
        self.scheduler.on_finished(policy, rid, inst.instance_id, self.now)
        inst.prefill_of.pop(rid, None)
        self._refuse(st, f"{inst.instance_id}: {err}")

    def _dispatch_decode(self, st: _Req) -> None:
        assert st.route is not None
        d = self.scheduler.decode_after_prefill(st.route, self._views("decode"), self.now)
        if d is None:
            self.pending["decode"].append(st)
            return
        p = st.prefill
        assert p is not None
        dec = self._instance("decode", d)
        st.decode_policy = self.scheduler.policies.pd_decode
        self.scheduler.on_routed(st.decode_policy, d, st.route, self.now)
        rec = st.rec
        st.decode = dec
        rec.decode_instance = dec.instance_id
        dec.incoming += 1
        hit = dec.cached_prefix_blocks(st.keys, rec.input_tokens)
        nbytes = int(max(0, rec.input_tokens - hit * self.block_size) * p.spec.perf.kv_bytes_per_token)
        tr = schedule_transfer(
            p.link, dec.link, nbytes,
            prefill_start_s=st.prefill_start_s, prefill_end_s=self.now,
            num_layers=p.spec.perf.profile.model.num_layers, mode=self.cfg.kv_transfer,
        )
        rec.kv_bytes = nbytes
        rec.transfer_s = tr.end_s - self.now
        self._push(tr.end_s, _KV_DONE, st)

    # ---- event handlers ---------------------------------------------------------
    def _on_arrival(self, st: _Req) -> None:
        self.outstanding += 1
        self.windows.arrived(st.rec)
        if self.cfg.ingress_s > 0:
            # The request reaches an engine (and the router decides) only after its HTTP hops.
            self._push(self.now + self.cfg.ingress_s, _DISPATCH, st)
        else:
            self._dispatch_entry(st)

    def _on_kick(self, inst: Instance) -> None:
        inst.kicked = False
        if inst.busy or inst.state is _IS_RELEASED or not inst.engine.has_work():
            return
        self._step(inst)

    def _step(self, inst: Instance) -> None:
        now = self.now
        if self.coast_decode and (k := plain_steps(inst.engine, now)) > 1:
            start_coast(self, inst, k)  # its next steps are invisible to the rest: one event for all of them
            return
        out = inst.engine.step(now)
        if out.num_scheduled == 0:
            # Blocked (e.g. KV held by leases or transfers not landed): retry when
            # something changes; a finishing step or a release kicks it again.
            wake = inst.engine.next_event_time(now)
            if wake is not None and wake > now:
                inst.kicked = True
                self._push(wake, _KICK, inst)
            return
        self.steps += 1
        inst.busy = True
        inst.step_start = now
        inst.step_out = out
        self.seq += 1
        heapq.heappush(self.heap, (now + out.duration + self.step_host_s, now, self.seq, _STEP_DONE, inst))

    def _on_step_done(self, inst: Instance, out: StepOutput) -> None:
        inst.busy = False
        now = self.now
        kv = out.kv_events
        if (kv.stored or kv.removed) and self.uses_prefixes:
            if self.router_view.event_lag_s > 0:
                self._push(now + self.router_view.event_lag_s, _KV_EVENTS, (inst, kv))
            else:
                self.router_view.apply_events(inst, kv)
        prefill_pool = inst.pool == "prefill"
        states = self.states
        itl_append = self.itl.append
        for ev in out.tokens:
            st = states[ev.request_id]
            rec = st.rec
            if prefill_pool:
                rec.prefill_done_s = now
                self.windows.prefilled(now, now - st.prefill_sent_s)
                inst.prefill_finished(ev.request_id)
                pol = self.scheduler.policies.prefill
                self.scheduler.on_prefill_done(pol, ev.request_id, now)
                self.scheduler.on_finished(pol, ev.request_id, inst.instance_id, now)
                st.prefill_start_s = inst.step_start
                if self.cfg.pd_handoff_s > 0:
                    # Prefill response -> router -> decode request -> side-channel pull: the decode
                    # side is chosen and starts pulling only after these hops.
                    self._push(now + self.cfg.pd_handoff_s, _HANDOFF, st)
                else:
                    self._dispatch_decode(st)
                continue
            if ev.index == 0:
                rec.first_token_s = now
                inst.prefill_finished(ev.request_id)
                assert st.decode_policy is not None
                self.scheduler.on_prefill_done(st.decode_policy, ev.request_id, now)
            else:
                itl_append(now - st.last_token_s)
            st.last_token_s = now
            if ev.finished:
                rec.finish_s = now
                assert st.decode_policy is not None
                self.scheduler.on_finished(st.decode_policy, ev.request_id, inst.instance_id, now)
                del states[ev.request_id]
                self.outstanding -= 1
                self.windows.completed(rec)
        eng = inst.engine
        if eng.running or eng.waiting:  # eng.has_work(), without the call on every step
            if not inst.kicked:
                # Arrivals at this instant were handled before this event, so the
                # next step can start right away without a separate kick event.
                self._step(inst)
        elif inst.state is State.DRAINING:
            self.maybe_release(inst)

    def _on_kv_done(self, st: _Req) -> None:
        p, d = st.prefill, st.decode
        assert p is not None and d is not None
        rec = st.rec
        rid = str(rec.index)
        d.incoming -= 1
        if d.coast is not None:
            reach(self, d)
        lease = p.engine.held.get(rid)
        # The engine expires leases only when it steps; an idle prefill engine's
        # timer would still fire in vLLM, so check the deadline here too.
        held = lease is not None and lease.expires_at > self.now
        p.engine.release(rid)
        if not held:
            self.kv_recomputes += 1  # lease expired: decode recomputes the prompt
        try:
            d.add(rid, rec.input_tokens, rec.output_tokens, st.keys, self.now, remote_prefilled=held)
        except ValueError as e:
            assert st.decode_policy is not None
            self._reject(st, d, st.decode_policy, e)
        else:
            self._kick(d)
        if p.engine.has_work():
            self._kick(p)  # released blocks may unblock its queue
        self.maybe_release(p)

    def _on_ready(self, inst: Instance) -> None:
        if inst.state is not State.STARTING:
            return
        inst.state = State.READY
        queue = self.pending[inst.pool]
        waiting, queue_copy = len(queue), list(queue)
        queue.clear()
        for st in queue_copy[:waiting]:
            if st.prefill is not None:  # prefilled remotely, waiting for a decode engine
                self._dispatch_decode(st)
            else:
                self._dispatch_entry(st)

    def maybe_release(self, inst: Instance) -> None:
        if inst.state is State.DRAINING and not inst.busy and inst.idle and inst.incoming == 0:
            inst.state = State.RELEASED
            inst.released_at = self.now
            self.scheduler.forget_worker(inst.instance_id)

    def _on_scrape(self, arrivals_left: bool) -> None:
        self.router_view.scrape(self.all_instances)
        # One scrape chain: the event being handled was its only entry, so anything left in the heap is other work.
        if arrivals_left or self.heap:
            self._push(self.now + self.cfg.view_refresh_s, _SCRAPE, None)

    # ---- autoscaling (see pdserve.sim.scaling) ------------------------------------
    def _on_tick(self) -> None:
        apply_tick(self)

    # ---- main loop ------------------------------------------------------------
    def run(self) -> SimResult:
        reqs = self.trace.requests
        n = len(reqs)
        bs = self.block_size
        hb = self.trace.hash_block_tokens
        heap = self.heap
        limit = self.cfg.max_sim_time_s if self.cfg.max_sim_time_s is not None else math.inf
        if self.autoscaler is not None and reqs:
            # An autoscaler that never scales a zero pool back up would tick forever.
            limit = min(limit, reqs[-1].arrival_s + 86400.0)
        if self.autoscaler is not None:
            tick, self.windows.origin = first_tick(self)
            self._push(tick, _TICK, None)
        if self.router_view.scraping:
            self._push(0.0, _SCRAPE, None)
        i = 0
        every = max(1, n // 100)
        pop = heapq.heappop
        on_step_done = self._on_step_done
        t_arr = self.next_arrival_s = reqs[0].arrival_s if n else math.inf
        while True:
            if heap and heap[0][0] < t_arr:
                self.current = entry = pop(heap)
                t, _, _, kind, obj = entry
                if t > limit:
                    break
                self.now = t
                if kind == _STEP_DONE:
                    on_step_done(obj, obj.step_out)  # type: ignore[arg-type,attr-defined]  # a _STEP_DONE carries its Instance
                elif kind == _COAST_DONE:
                    end_coast(self, obj)  # type: ignore[arg-type]
                elif kind == _KV_EVENTS:
                    # a _KV_EVENTS carries (Instance, KvEvents); no typing.cast: its tuple[...] is built on every call
                    self.router_view.apply_events(*obj)  # type: ignore[misc]
                elif kind == _KICK:
                    self._on_kick(obj)  # type: ignore[arg-type]
                elif kind == _KV_DONE:
                    self._on_kv_done(obj)  # type: ignore[arg-type]
                elif kind == _READY:
                    self._on_ready(obj)  # type: ignore[arg-type]
                elif kind == _DISPATCH:
                    self._dispatch_entry(obj)  # type: ignore[arg-type]
                elif kind == _HANDOFF:
                    self._dispatch_decode(obj)  # type: ignore[arg-type]
                elif kind == _SCRAPE:
                    self._on_scrape(i < n)
                else:
                    self._on_tick()
                    self._push(t + self.autoscaler.interval_s, _TICK, None)  # type: ignore[union-attr]
            elif i < n:
                if t_arr > limit:
                    break
                self.now = t_arr
                self.current = None
                r = reqs[i]
                rec = RequestRecord(r.index, r.arrival_s, r.input_tokens, r.output_tokens)
                self.records.append(rec)
                st = _Req(rec, block_keys(r, bs, hb, self.key_ids))
                self.states[str(r.index)] = st
                self._on_arrival(st)
                i += 1
                t_arr = self.next_arrival_s = reqs[i].arrival_s if i < n else math.inf
                if self.progress is not None and i % every == 0:
                    self.progress(i, n)
            else:
                break
            if i >= n and self.outstanding == 0:
                break
        settle_coasts(self, limit)
        return self._result()

    def _result(self) -> SimResult:
        # A coast's steps are events the loop never popped; the last may be the latest step before max_sim_time_s.
        end, itl = max(self.now, self.coasted_until), sorted_samples(self.itl, self.itl_repeats)
        return collect_result(self.cfg, self.records, itl, self.all_instances, end, gpus=self.static_gpus,
                              kv_recomputes=self.kv_recomputes, rejected=self.rejected, steps=self.steps,
                              scaling_events=self.scaling_events)


def run_simulation(
    trace: Trace,
    config: SimConfig,
    *,
    rate_scale: float = 1.0,
    autoscaler: Autoscaler | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``trace`` (arrivals divided by ``rate_scale``) on ``config``.

    ``autoscaler`` (see :mod:`pdserve.sim.autoscale`) resizes the pools every
    ``autoscaler.interval_s`` virtual seconds. Raises :class:`SimConfigError` for a
    configuration that cannot run (unknown profile or policy, model too large).
    """
    if not trace.requests:
        raise SimConfigError("the trace has no requests")
    return Simulation(trace.scaled(rate_scale), config, autoscaler=autoscaler, progress=progress).run()
