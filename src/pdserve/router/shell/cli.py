"""``pdserve router``: the KV-aware prefill/decode router."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from pathlib import Path

from aiohttp import web

from pdserve.api.vllm_versions import DEFAULT_VERSION
from pdserve.api.vllm_versions import VERSIONS as VLLM_VERSIONS
from pdserve.router.shell.auth import api_keys
from pdserve.router.shell.cpus import default_processes
from pdserve.router.shell.config import RouterConfig, add_routing_args, routing_from_args


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pdserve router", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    w = p.add_argument_group("workers (choose one source)")
    w.add_argument("--prefill", nargs="+", default=[], metavar="URL", help="prefill workers (omit for colocated)")
    w.add_argument("--decode", nargs="+", default=[], metavar="URL", help="decode (or colocated) workers")
    w.add_argument("--discovery-file", type=Path, help='JSON {"prefill": [...], "decode": [...]}, re-read on change')
    w.add_argument("--k8s-service", help="watch pods labelled pdserve.io/service=NAME")
    w.add_argument("--k8s-namespace", default="default")
    w.add_argument("--worker-port", type=int, default=8000, help="worker HTTP port for Kubernetes pods")
    k = p.add_argument_group("tokenizer (the served model's, as vLLM loads it)")
    k.add_argument("--tokenizer", help="hub id or local directory (tokenizer.json / tokenizer_config.json / chat "
                   "template), the same as the workers' --tokenizer; hub token from $HF_TOKEN")
    k.add_argument("--tokenizer-mode", default="auto", choices=["auto", "hf", "slow", "mistral", "mock"],
                   help="as vLLM's --tokenizer-mode; mock = pdserve's hash-word tokenizer for mock workers")
    k.add_argument("--tokenizer-revision", help="hub revision of the tokenizer")
    k.add_argument("--trust-remote-code", action="store_true")
    k.add_argument("--chat-template", help="as vLLM's --chat-template: a file or the template itself")
    k.add_argument("--chat-template-content-format", default="auto", choices=["auto", "string", "openai"])
    k.add_argument("--vllm-version", default=DEFAULT_VERSION, choices=sorted(VLLM_VERSIONS),
                   help="the workers' vLLM release: where releases preprocess chats differently (add_special_tokens, "
                        "developer role, Mistral requests), the router follows this one")
    k.add_argument("--tokenizer-fallback", default="none", choices=["none", "approx"],
                   help="approx: start even when the tokenizer cannot be loaded, routing by the router's own "
                        "history (prefix_approx), without stream migration; sets pdserve_router_tokenizer_fallback")
    add_routing_args(p)
    e = p.add_argument_group("KV events")
    e.add_argument("--kv-events", action="store_true", help="subscribe to the workers' ZMQ KV events")
    e.add_argument("--kv-events-port", type=int, default=5557)
    a = p.add_argument_group("limits")
    a.add_argument("--max-concurrency", type=int, default=4096)
    a.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024)
    t = p.add_argument_group("upstream timeouts and resilience")
    t.add_argument("--connect-timeout", type=float, default=3.0)
    t.add_argument("--prefill-timeout", type=float, default=600.0)
    t.add_argument("--read-timeout", type=float, default=120.0, help="longest silence between streamed chunks")
    t.add_argument("--request-timeout", type=float, default=3600.0)
    t.add_argument("--shutdown-timeout", type=float, default=10.0,
                   help="after SIGTERM, seconds in-flight requests have to finish; streams still running one second "
                        "before it end with an OpenAI-style error event and [DONE]. Keep it below the pod's "
                        "terminationGracePeriodSeconds minus its preStop sleep")
    t.add_argument("--max-retries", type=int, default=2)
    t.add_argument("--no-migration", action="store_true", help="end a stream with an error instead of migrating")
    t.add_argument("--scrape-interval", type=float, default=0.5, help="seconds between worker /metrics scrapes")
    p.add_argument("--upstream-client", choices=["http1", "aiohttp"], default="http1",
                   help="client for completions sent to workers: the router's lean HTTP/1.1 client (plain http:// "
                        "workers; https:// ones always use aiohttp) or aiohttp's")
    p.add_argument("--http-server", choices=["lean", "aiohttp"], default="lean",
                   help="server for client requests: the router's lean HTTP/1.1 server (default; asyncio protocol + "
                        "httptools, router/shell/lean_server.py) or aiohttp's web server, same endpoints and "
                        "behaviour (see router/README.md for the few differences)")
    p.add_argument("--processes", type=int, default=None,
                   help="serve from N router processes sharing the port (SO_REUSEPORT); each has its own routing "
                        "state, /metrics is summed over all (see router/shell/supervisor.py). Default: one per whole CPU "
                        "of the container's cgroup quota, else per usable CPU (router/shell/cpus.py)")
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for each of --processes N
    p.add_argument("--api-key", nargs="+", default=None,
                   help="require 'Authorization: Bearer <one of these keys>' on /v1/* (vLLM's --api-key; default: "
                        "$VLLM_API_KEY); /health and /metrics stay open, as on vLLM")
    p.add_argument("--no-debug-header", action="store_true", help="omit the x-pdserve-route header")
    o = p.add_argument_group("tracing (OpenTelemetry)")
    o.add_argument("--otlp-traces-endpoint", metavar="URL",
                   help="as vLLM's flag: export one trace per request (route, prefill, KV hand-off, decode, "
                        "migration) over OTLP/HTTP protobuf, e.g. http://collector:4318 (/v1/traces is added); "
                        "workers get W3C traceparent so their spans join. Off when not given")
    o.add_argument("--otlp-traces-sample-ratio", type=float, default=1.0, metavar="R",
                   help="fraction of new traces kept (a client's traceparent sampled flag is followed)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="auto = uvloop when installed")
    return p


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    return RouterConfig(
        routing=routing_from_args(args),
        host=args.host, port=args.port, prefill=args.prefill, decode=args.decode,
        discovery_file=args.discovery_file, k8s_service=args.k8s_service,
        k8s_namespace=args.k8s_namespace, worker_http_port=args.worker_port, kv_events=args.kv_events,
        kv_events_port=args.kv_events_port,
        max_concurrency=args.max_concurrency, max_body_bytes=args.max_body_bytes,
        connect_timeout_s=args.connect_timeout, prefill_timeout_s=args.prefill_timeout,
        read_timeout_s=args.read_timeout, request_timeout_s=args.request_timeout, max_retries=args.max_retries,
        shutdown_timeout_s=args.shutdown_timeout,
        migrate=not args.no_migration, scrape_interval_s=args.scrape_interval,
        debug_header=not args.no_debug_header, upstream_client=args.upstream_client,
        http_server=args.http_server,
        tokenizer=args.tokenizer, tokenizer_mode=args.tokenizer_mode, tokenizer_revision=args.tokenizer_revision,
        trust_remote_code=args.trust_remote_code, chat_template=args.chat_template,
        chat_template_content_format=args.chat_template_content_format, tokenizer_fallback=args.tokenizer_fallback,
        vllm_version=args.vllm_version, api_keys=api_keys(args.api_key),
        otlp_traces_endpoint=args.otlp_traces_endpoint, otlp_traces_sample_ratio=args.otlp_traces_sample_ratio,
    )


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.processes is None:
        args.processes, why = default_processes()
        print(f"pdserve router: --processes {args.processes} ({why})", file=sys.stderr, flush=True)
    if args.processes < 1:
        print(f"pdserve router: --processes must be at least 1, got {args.processes}", file=sys.stderr)
        return 2
    if args.processes > 1:
        try:
            # Refuse bad flags and an unloadable tokenizer once, not N times.
            from prometheus_client import CollectorRegistry

            from pdserve.router.shell.tokenizing import load_router_tokenizer

            cfg = config_from_args(args)
            cfg.validate()
            if cfg.prefill or cfg.decode:  # a bad URL, too, is one message rather than one per process
                from pdserve.router.shell.app import static_endpoints

                static_endpoints(cfg)
            load_router_tokenizer(cfg, CollectorRegistry())
        except ValueError as e:
            print(f"pdserve router: {e}", file=sys.stderr)
            return 2
        from pdserve.router.shell.supervisor import supervise

        try:
            return supervise(argv, args.host, args.port, args.processes, grace_s=args.shutdown_timeout + 5.0)
        except OSError as e:
            print(f"pdserve router: {e}", file=sys.stderr)
            return 1
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(args)
        cfg.validate()
        if cfg.http_server == "lean":
            from pdserve.router.shell.lean_server import LeanServer

            lean = LeanServer.build(cfg)
        else:
            from pdserve.router.shell.app import build_app

            app = build_app(cfg)
    except ValueError as e:
        print(f"pdserve router: {e}", file=sys.stderr)
        return 2
    # Everything built so far (modules, app, config) lives for the whole run: move it out
    # of the collector's reach, so a full collection walks only what requests allocate.
    # Measured: a full collection over the started router's ~51k objects takes 12.6 ms
    # on an idle core, a pause every stream in flight then waits out.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    # aiohttp's default listen backlog of 128 drops SYNs when a burst of clients connects
    # at once, and each drop costs the client a 1 s SYN retransmit (TTFT p99 of ~1.1 s
    # at 256 streams in bench/router/overhead.py); the kernel caps it at somaxconn.
    if cfg.http_server == "lean":
        from pdserve.router.shell.lean_server import run

        run(lean, backlog=4096, reuse_port=args.reuse_port or None, loop=_new_loop(args.event_loop))
        return 0
    web.run_app(app, host=cfg.host, port=cfg.port, access_log=None, print=lambda *_: None, backlog=4096,
                reuse_port=args.reuse_port or None,
                handle_signals=True, shutdown_timeout=cfg.shutdown_timeout_s, loop=_new_loop(args.event_loop))
    return 0


# Young-generation collections at 256+ streams in flight: the default threshold (700
# allocations) runs one every few requests, and each generation-1 collection walks every
# request still in flight (bench/router/burst.py). A larger first threshold collects the
# same garbage in fewer, larger passes; cycles are rare in the request path (memory is
# freed by reference counting), so memory held between passes stays small.
GC_THRESHOLDS = (50_000, 20, 100)


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    # uvloop: 6-17 % less router CPU per request at 64-256 streams (bench/router/overhead.py).
    if kind in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            if kind == "uvloop":
                raise SystemExit("pdserve router: --event-loop uvloop requested but uvloop is not installed") from None
    return asyncio.new_event_loop()
