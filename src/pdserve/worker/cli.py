"""``pdserve worker MODEL``: a mock vLLM server with ``vllm serve``'s flags and no GPU."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import signal
import sys
import uuid
from typing import Any

import prometheus_client
from aiohttp import web
from pydantic import BaseModel, ValidationError

from pdserve.api import vllm_versions
from pdserve.tokenization import TOKENIZER_MODES, ModelTokenizer, TokenizerLoadError, load_tokenizer
from pdserve.worker.engine import Engine, EngineConfig
from pdserve.worker.kv_events import KVEventsConfig, ZmqEventPublisher
from pdserve.worker.metrics import WorkerMetrics
from pdserve.worker.nixl import KVTransferConfig, SideChannelServer
from pdserve.worker.perf import PerfModel, available_profiles, load_profile
from pdserve.worker.runner import EngineRunner
from pdserve.worker.server import ServerSettings, WorkerServer
from pdserve.worker.vllm_emulation import CURRENT_VERSION, VERSIONS, VllmBehaviour, behaviour
from pdserve.worker.vllm_hash import BlockHasher, is_reproducible

READY_MARKER = "pdserve worker ready:"


def _json_arg(model: type[BaseModel], flag: str) -> Any:
    def parse(text: str) -> BaseModel:
        try:
            return model.model_validate(json.loads(text))
        except json.JSONDecodeError as err:
            raise argparse.ArgumentTypeError(f"{flag}: not valid JSON ({err})") from None
        except ValidationError as err:
            e = err.errors()[0]
            raise argparse.ArgumentTypeError(f"{flag}: {'.'.join(map(str, e['loc']))}: {e['msg']}") from None
    return parse


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return v
    return parse


def _non_negative(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not v >= 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return v
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdserve worker", description="Mock vLLM worker: vLLM's HTTP API, metrics and "
                                "KV events on a simulated GPU (roofline engine model).")
    p.add_argument("model", help="model name or path, as for `vllm serve`")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed in the ready line)")
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer source as for vLLM: a hub id or a directory with tokenizer.json / "
                        "tokenizer_config.json (default: the model)")
    p.add_argument("--tokenizer-mode", choices=TOKENIZER_MODES, default="auto",
                   help="as vLLM's (auto, hf, slow, mistral); `mock` = pdserve's hash-word tokenizer, "
                        "only when asked for")
    p.add_argument("--tokenizer-revision", default=None)
    p.add_argument("--chat-template", default=None, help="a chat template or a file holding one")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--max-model-len", type=_positive(int), default=None)
    p.add_argument("--block-size", type=_positive(int), default=16)
    p.add_argument("--max-num-seqs", type=_positive(int), default=256)
    p.add_argument("--max-num-batched-tokens", type=_positive(int), default=8192)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--prefix-caching-hash-algo", default=None,
                   help="sha256 (vLLM's default: SHA-256 over pickle), sha256_cbor; 0.33 adds xxhash, xxhash_cbor. "
                        "The chain's seed follows the emulated version's rule for PYTHONHASHSEED")
    p.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--tensor-parallel-size", "-tp", type=_positive(int), default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--num-gpu-blocks-override", type=_positive(int), default=None)
    p.add_argument("--kv-transfer-config", type=_json_arg(KVTransferConfig, "--kv-transfer-config"), default=None)
    p.add_argument("--kv-events-config", type=_json_arg(KVEventsConfig, "--kv-events-config"), default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--disable-log-requests", action="store_true", help="accepted for vllm compatibility")
    p.add_argument("--otlp-traces-endpoint", default=None,
                   help="as vLLM: export an llm_request span per finished request (parent: the request's W3C "
                        "traceparent) to this OTLP endpoint; the mock speaks http/protobuf only (full /v1/traces URL)")
    p.add_argument("--disable-log-stats", action="store_true", help="accepted for vllm compatibility")
    m = p.add_argument_group("mock-only")
    m.add_argument("--mock-vllm-version", choices=sorted(VERSIONS), default=CURRENT_VERSION,
                   help="the vLLM release whose defaults the mock follows (hashing and its seed, KV event "
                        "encoding, NIXL P/D pairing, lease and side-channel defaults)")
    m.add_argument("--mock-profile", default="llama-3.1-8b-h100", help=f"one of: {', '.join(available_profiles())}")
    m.add_argument("--mock-speedup", type=_positive(float), default=1.0,
                   help="run the simulated GPU this many times faster than real time")
    m.add_argument("--mock-frontend-latency", type=_non_negative(float), default=None,
                   help="simulated seconds each request spends in vLLM's API server before the engine can "
                        "schedule it (default: the profile's calibrated value; 0 = not modelled)")
    m.add_argument("--mock-startup-delay", type=float, default=0.0,
                   help="seconds before the port listens (model load time)")
    m.add_argument("--mock-kv-link-gbps", type=_positive(float), default=100.0,
                   help="this worker's KV link in Gbit/s (a transfer holds the sender's and the receiver's link: "
                        "pdserve.common.kvlink, the simulator's model)")
    m.add_argument("--mock-side-channel-host", default=None,
                   help="advertised side-channel host (default: $VLLM_NIXL_SIDE_CHANNEL_HOST or localhost)")
    m.add_argument("--mock-side-channel-port", type=int, default=None,
                   help="side-channel port (default: $VLLM_NIXL_SIDE_CHANNEL_PORT or the version's default: "
                        "5557 in 0.11, 5600 in 0.33; 0 = free port)")
    m.add_argument("--mock-kv-lease-seconds", type=_positive(float), default=None,
                   help="how long prefilled KV waits for its decode (default as the version: 0.11 "
                        "$VLLM_NIXL_ABORT_REQUEST_TIMEOUT or 120; 0.33 kv_connector_extra_config.kv_lease_duration or 30)")
    m.add_argument("--mock-mean-output-tokens", type=_positive(int), default=256,
                   help="mean length before the mock model emits EOS (ignore_eos / max_tokens override)")
    m.add_argument("--mock-max-body-bytes", type=_positive(int), default=32 * 1024 * 1024)
    m.add_argument("--mock-shutdown-timeout", type=float, default=30.0,
                   help="seconds SIGTERM waits for in-flight requests")
    return p


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_version_choices(parser, args)
    try:
        profile = load_profile(args.mock_profile, args.tensor_parallel_size)
    except ValueError as err:
        print(f"pdserve worker: {err}", file=sys.stderr)
        return 2
    try:
        # vLLM loads the tokenizer before the engine too: an unreachable one fails the start, clearly
        tok = load_tokenizer(args.tokenizer or args.model, args.tokenizer_mode, revision=args.tokenizer_revision,
                             trust_remote_code=args.trust_remote_code, chat_template=args.chat_template,
                             vllm_version=args.mock_vllm_version)  # that release's chat preprocessing
    except TokenizerLoadError as err:
        print(f"pdserve worker: cannot load the tokenizer: {err}", file=sys.stderr)
        return 1
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(args, PerfModel(profile), tok))
    except (ValueError, OSError) as err:
        print(f"pdserve worker: {err}", file=sys.stderr)
        return 1
    return 0


def _check_version_choices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Flags whose choices differ between releases, refused as that release's parser refuses them
    (choices from pdserve.api.vllm_versions: ``TokenizerMode`` in vllm/config/model.py, ``BlockSize``
    in 0.11's vllm/config/cache.py)."""
    info = vllm_versions.VERSIONS[args.mock_vllm_version]
    if args.tokenizer_mode != "mock" and args.tokenizer_mode not in info.tokenizer_modes:
        parser.error(f"argument --tokenizer-mode: invalid choice: {args.tokenizer_mode!r} (vLLM {info.version} "
                     f"accepts {', '.join(info.tokenizer_modes)}; the mock adds 'mock')")
    if info.block_sizes is not None and args.block_size not in info.block_sizes:
        parser.error(f"argument --block-size: invalid choice: {args.block_size} (vLLM {info.version} accepts "
                     f"{', '.join(map(str, info.block_sizes))})")


def _loop_factory() -> Any:
    """uvloop when available: its socket writes are what a streaming worker spends its CPU on."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _lease_seconds(args: argparse.Namespace, vllm: VllmBehaviour) -> float:
    if args.mock_kv_lease_seconds is not None:
        return float(args.mock_kv_lease_seconds)
    if vllm.kv_lease_source == "env:VLLM_NIXL_ABORT_REQUEST_TIMEOUT":
        return float(os.environ.get("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", vllm.kv_lease_s))
    extra = (args.kv_transfer_config.kv_connector_extra_config if args.kv_transfer_config else {}) or {}
    return float(extra.get("kv_lease_duration", vllm.kv_lease_s))


def output_token_ids(tok: ModelTokenizer) -> tuple[int, ...]:
    """The ids the mock model samples its text from: common English words that are one token in the
    served tokenizer (readable output, real ids); any in-vocabulary ids if too few are."""
    ids: list[int] = []
    for word in _OUTPUT_WORDS:
        piece = tok.encode(" " + word, add_special_tokens=False)
        if len(piece) == 1 and piece[0] != tok.eos_token_id and piece[0] not in ids:
            ids.append(piece[0])
    if len(ids) >= 16:
        return tuple(ids)
    return tuple(i for i in range(min(tok.vocab_size, 1024)) if i != tok.eos_token_id)


_OUTPUT_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can its some time "
    "than only into other these two may then first any like very could new now way also made after over did "
    "many before must through back years where much your well down should because each just those people how "
    "model token cache prefill decode request server latency memory block router batch stream queue engine"
).split()


async def serve(args: argparse.Namespace, perf: PerfModel, tok: ModelTokenizer) -> None:
    if args.mock_startup_delay > 0:
        await asyncio.sleep(args.mock_startup_delay)  # "loading weights": the port is not open yet
    max_len = args.max_model_len or perf.profile.model.max_position_embeddings
    num_blocks = args.num_gpu_blocks_override or perf.num_kv_blocks(args.block_size, args.gpu_memory_utilization)
    if num_blocks * args.block_size < max_len:
        raise ValueError(f"KV cache holds {num_blocks * args.block_size} tokens, less than max_model_len={max_len}; "
                         "lower --max-model-len or raise --gpu-memory-utilization")
    names = args.served_model_name or [args.model]
    vllm = behaviour(args.mock_vllm_version)
    hasher = BlockHasher.from_env(args.prefix_caching_hash_algo or vllm.default_hash_algo, vllm.version)
    prometheus_client.disable_created_metrics()  # vLLM exposes no *_created series
    cfg = EngineConfig(num_blocks=num_blocks, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
                       max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=max_len,
                       enable_prefix_caching=args.enable_prefix_caching,
                       enable_chunked_prefill=args.enable_chunked_prefill,
                       long_prefill_token_threshold=args.long_prefill_token_threshold,
                       kv_lease_s=_lease_seconds(args, vllm) * args.mock_speedup, hasher=hasher,
                       free_uncached_first=vllm.free_uncached_first,
                       eos_token_id=-1 if tok.eos_token_id is None else tok.eos_token_id,
                       output_token_ids=output_token_ids(tok),
                       frontend_latency_s=(perf.profile.efficiency.frontend_latency_s
                                           if args.mock_frontend_latency is None else args.mock_frontend_latency))
    metrics = WorkerMetrics(names[0], max_len)
    ev_cfg: KVEventsConfig | None = args.kv_events_config
    publisher = (ZmqEventPublisher(ev_cfg, encoding=vllm.event_encoding)
                 if ev_cfg and ev_cfg.enable_kv_cache_events and ev_cfg.publisher != "null" else None)
    runner = EngineRunner(Engine(cfg, perf), metrics, args.mock_speedup, publisher)
    if args.otlp_traces_endpoint:
        from pdserve.worker.tracing import WorkerTracer, provider_for

        runner.tracer = WorkerTracer(provider_for(args.otlp_traces_endpoint))
    runner.start()
    kvt: KVTransferConfig = args.kv_transfer_config or KVTransferConfig()
    settings = ServerSettings(
        model=args.model, served_model_names=names, max_model_len=max_len,
        engine_id=kvt.engine_id or str(uuid.uuid4()), tp_size=perf.tp,
        side_channel_host=args.mock_side_channel_host or os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost"),
        kv_transfer=kvt, kv_link_gbps=args.mock_kv_link_gbps, mean_output_tokens=args.mock_mean_output_tokens, vllm=vllm)
    side: SideChannelServer | None = None
    if kvt.kv_connector:
        port = args.mock_side_channel_port
        if port is None:
            port = int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", vllm.side_channel_port))
        side = SideChannelServer(runner, settings.engine_id, perf, args.mock_kv_link_gbps, args.mock_speedup)
        bind_host = _side_channel_bind_host(settings.side_channel_host)
        settings.side_channel_port = await side.start(bind_host, port)
    server = WorkerServer(settings, runner, tok)
    web_runner = web.AppRunner(server.app(args.mock_max_body_bytes), access_log=None, handle_signals=False)
    await web_runner.setup()
    # A burst of hundreds of connects (a router or benchmark opening its pool) overflows
    # aiohttp's default backlog of 128, and each dropped SYN costs the client a 1 s retry.
    site = web.TCPSite(web_runner, args.host, args.port, reuse_address=True, backlog=4096)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    if not is_reproducible(hasher.algo, vllm.version, os.environ.get("PYTHONHASHSEED")):
        # vLLM warns likewise (kv_cache_utils.init_none_hash): block hashes differ between processes
        print(f"pdserve worker: PYTHONHASHSEED is not set: NONE_HASH is random for {hasher.algo} on vLLM "
              f"{vllm.version}, so block hashes are not reproducible across processes", file=sys.stderr, flush=True)
    print(f"{READY_MARKER} http://{args.host}:{port} model={names[0]} profile={perf.profile.name} "
          f"vllm={vllm.version} hash={hasher.algo} tokenizer={tok.mode}:{tok.name} "
          f"blocks={num_blocks} side_channel={settings.side_channel_port or '-'} "
          f"kv_events={publisher.endpoint if publisher else '-'}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    # Drain: refuse new work, let in-flight requests finish, then close.
    server.draining = True
    deadline = loop.time() + args.mock_shutdown_timeout
    while (server.active or runner.inflight) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    await web_runner.cleanup()
    if side is not None:
        await side.stop()
    await runner.stop()
    if runner.tracer is not None:
        runner.tracer.shutdown()  # flush the batched spans


def _side_channel_bind_host(advertised: str) -> str:
    """Bind the side channel where it is advertised, so workers sharing a host
    (pods with their own IPs, or the e2e runner's 127.x pod IPs) don't collide;
    a DNS name can't be bound, so it falls back to every interface."""
    if advertised == "localhost":
        return "127.0.0.1"
    try:
        ipaddress.ip_address(advertised)
    except ValueError:
        return "0.0.0.0"
    return advertised
