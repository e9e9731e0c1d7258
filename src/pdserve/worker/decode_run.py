"""Runs of *plain* decode steps: many engine steps at once, for the simulator.

A plain step is one in which nothing is held, every running request decodes one
token within its blocks, nothing waiting can be admitted because each waiting request
is still gated (``schedulable_at``: in the modelled front-end, or its KV not landed)
past the step's start, and moreover no request gets its first token or finishes, no
block is allocated and no block becomes full (so it is neither cached nor reported in
a KV event). ``Engine.step`` takes its decode fast path for such a step when nothing
waits, and otherwise its general path, whose admission loop only skips the gated
requests and puts them back: the same arithmetic either way. Such a step changes nothing that anyone
outside the engine can see (queue lengths, KV usage, the prefix cache, the router's
index): only its requests' own progress. A run of them can therefore be computed in
one go, before the discrete-event loop reaches their times, as long as nothing can
reach the engine in between (the caller bounds the run by the next event that could).

``plan`` gives the end times such steps would have, without touching the engine, up to
the first step that ends at or after the earliest gate of a waiting request (the step
after it may admit that request);
``advance`` then applies the first ``k`` of them. Together they reproduce ``k`` calls
of ``Engine.step`` exactly: the same cost arguments in the same order, the same
sampled tokens, the same float times (each step starts when the previous ended,
``end = (start + duration) + gap_s``, as the simulator schedules them).
tests/worker/test_decode_run.py checks this against ``Engine.step`` itself.
"""

from __future__ import annotations

from pdserve.worker.engine import Engine, initial_rng


def plain_steps(engine: Engine, now: float) -> int:
    """How many of the engine's next steps from ``now`` are plain, not counting the bound that a waiting
    request's gate puts on them (``plan`` applies that); 0 when the next one is not plain."""
    if engine.held or not engine.running:
        return 0
    for w in engine.waiting:
        gate = w.schedulable_at
        if gate is None or not gate > now:
            return 0  # admissible now (or blocked only by KV or batch limits, which a step may change)
    cfg = engine.config
    running = engine.running
    if len(running) > cfg.max_num_batched_tokens or cfg.long_prefill_token_threshold < 0:
        return 0
    ev = engine.pool.events
    if ev.stored or ev.removed or ev.cleared:
        return 0  # events recorded outside a step come out of the next one
    bs = cfg.block_size
    caching = cfg.enable_prefix_caching  # without it a full block is only counted, never cached or reported
    limit = cfg.max_model_len - 2  # the step that reaches max_model_len finishes its request
    k = limit
    for req in running:
        ctx = req.num_computed
        if (req.num_tokens - ctx != 1 or ctx < req.num_prompt_tokens or not req.ignore_eos
                or req.stop_token_ids):
            return 0  # a prefill chunk, a first token, or a request that may stop on a sampled token
        # k = min(k, ...) written out: builtin min() parses its arguments through PyArg_ParseTupleAndKeywords,
        # ~1,500 instructions a call, and this runs for every request on every step the simulator starts
        a = len(req.block_ids) * bs - ctx  # the step that needs a new block
        if a < k:
            k = a
        a = req.max_tokens - len(req.output_token_ids) - 1  # the step of the last token
        if a < k:
            k = a
        a = limit - ctx
        if a < k:
            k = a
        if caching:
            a = (req.num_cached_blocks + 1) * bs - ctx - 1  # the step that fills a block
            if a < k:
                k = a
    return k if k > 0 else 0


def plan(engine: Engine, now: float, n: int, until: float, gap_s: float = 0.0) -> list[float]:
    """End times of up to ``n`` plain steps run back to back from ``now``, up to and including the first
    that does not end before ``until`` or before the earliest gate of a waiting request (so every planned
    step starts before it); the caller has checked ``n <= plain_steps(engine, now)``."""
    for w in engine.waiting:
        gate = w.schedulable_at
        assert gate is not None and gate > now  # plain_steps checked it
        if gate < until:
            until = gate
    running = engine.running
    seqs = len(running)
    attn_pairs = 0
    kv_read = 0
    for req in running:
        ctx = req.num_computed
        attn_pairs += ctx + 1
        kv_read += ctx
    # Engine._decode_step's arithmetic: an int sum of (context + 1) per request, converted per step
    return engine._step_ends(now, n, seqs, attn_pairs, kv_read, until, gap_s)


def _stream(engine: Engine, seed: int, n: int) -> tuple[list[int], list[int]]:
    """The first ``n`` (at least) tokens and sampler states of the stream ``Engine._sample`` draws for a request
    with ``seed`` that ignores EOS and has no stop tokens; computed once per engine and extended as needed."""
    r0 = initial_rng(seed)
    cached = engine.sample_streams.get(r0)
    if cached is None:
        cached = engine.sample_streams[r0] = ([], [])
    tokens, states = cached
    if len(tokens) < n:
        words = engine.config.output_token_ids
        n_words = len(words)
        rng = states[-1] if states else r0
        for _ in range(n - len(tokens)):
            rng = (rng * 1664525 + 1013904223) & 0xFFFFFFFF  # as Engine._sample
            states.append(rng)
            tokens.append(words[(rng >> 8) % n_words])
    return tokens, states


def advance(engine: Engine, k: int) -> None:
    """Apply ``k`` plain steps to the engine's requests (the state ``k`` calls of ``step`` leave)."""
    cfg = engine.config
    bs = cfg.block_size
    count_full = not cfg.enable_prefix_caching
    for req in engine.running:
        out = req.output_token_ids
        idx = len(out)
        # The sampler state after idx tokens of this seed's stream, if the request has drawn exactly those
        # (a caller may hand in output tokens it did not sample): then its next k tokens are the stream's next k.
        tokens, states = _stream(engine, req.seed, idx + k)
        if (states[idx - 1] if idx else initial_rng(req.seed)) == req.rng:
            out.extend(tokens[idx:idx + k])
            req.rng = states[idx + k - 1]
        else:
            words = cfg.output_token_ids
            n_words = len(words)
            append = out.append
            rng = req.rng
            for _ in range(k):
                rng = (rng * 1664525 + 1013904223) & 0xFFFFFFFF  # as Engine._sample
                append(words[(rng >> 8) % n_words])
            req.rng = rng
        req.num_computed += k
        req.num_tokens += k
        if count_full and req.num_computed // bs > req.num_cached_blocks:
            req.num_cached_blocks = req.num_computed // bs  # as Engine._cache_full_blocks without caching
    engine.generated_tokens += k * len(engine.running)
