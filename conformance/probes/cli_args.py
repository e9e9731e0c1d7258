"""Parse rendered `vllm serve` command lines with vLLM's own CLI code.

Request: {"argvs": [[arg, ...], ...]} (the words after `vllm serve`), optional
"model_dir": a local model directory (config.json + tokenizer) put in place of the
model so `create_engine_config` can build VllmConfig without the hub.
Answer: per argv, the stage reached (parse, validate, engine_args, engine_config)
and the values vLLM read, or the error of the stage that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
from typing import Any

from common import error_text, main, use_cpu_platform

FIELDS = (
    "model", "tokenizer", "tokenizer_mode", "served_model_name", "tensor_parallel_size", "block_size",
    "enable_prefix_caching", "prefix_caching_hash_algo", "port",
)


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if hasattr(x, "model_dump"):
        return x.model_dump()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def serve_parser() -> tuple[argparse.ArgumentParser, Any]:
    """vLLM's `vllm` top-level parser with only its `serve` subcommand, as cli/main.py builds it."""
    from vllm.entrypoints.cli.serve import ServeSubcommand

    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:  # moved in later releases
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmd = ServeSubcommand()
    cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    return parser, cmd


def check(argv: list[str], model_dir: str | None) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser, cmd = serve_parser()
    out: dict[str, Any] = {"argv": argv, "stage": "parse"}
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(["serve", *argv])
    except SystemExit as e:
        out["error"] = f"argparse exit {e.code}: {err.getvalue().strip()[-2000:]}"
        return out
    except Exception as e:
        out["error"] = error_text(e)
        return out
    out["stage"] = "validate"
    try:
        cmd.validate(args)
        # ServeSubcommand.cmd: a positional model tag takes precedence over --model.
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
    except Exception as e:
        out["error"] = error_text(e)
        return out
    # What vLLM's parser read, before the model's location is swapped below.
    out["values"] = {name: _plain(getattr(args, name, None)) for name in FIELDS}
    if model_dir is not None:
        # The parsed command line is what is checked; only the weights' location changes, and
        # the tokenizer's when it named the model (a hub id this machine cannot reach).
        if args.tokenizer in (None, args.model):
            args.tokenizer = model_dir
        args.model = model_dir
    out["stage"] = "engine_args"
    try:
        engine_args = AsyncEngineArgs.from_cli_args(args)
    except Exception as e:
        out["error"] = error_text(e)
        return out
    out["kv_transfer_config"] = _plain(engine_args.kv_transfer_config)
    out["kv_events_config"] = _plain(engine_args.kv_events_config)
    if model_dir is None:
        out["stage"] = "done"
        return out
    out["stage"] = "engine_config"
    try:
        config = engine_args.create_engine_config()
    except Exception as e:
        out["error"] = error_text(e)
        return out
    out["engine_config"] = {
        "block_size": config.cache_config.block_size,
        "enable_prefix_caching": config.cache_config.enable_prefix_caching,
        "prefix_caching_hash_algo": config.cache_config.prefix_caching_hash_algo,
        "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
        "kv_connector": config.kv_transfer_config.kv_connector if config.kv_transfer_config else None,
        "kv_role": config.kv_transfer_config.kv_role if config.kv_transfer_config else None,
        "kv_events_endpoint": config.kv_events_config.endpoint if config.kv_events_config else None,
        # vLLM refuses this flag here unless OpenTelemetry imports (the conformance venvs' otel add-on).
        "otlp_traces_endpoint": config.observability_config.otlp_traces_endpoint,
    }
    out["stage"] = "done"
    return out


def handle(request: dict[str, Any]) -> dict[str, Any]:
    platform = use_cpu_platform()
    results = [check(list(argv), request.get("model_dir")) for argv in request["argvs"]]
    return {"platform": platform, "results": results}


if __name__ == "__main__":
    main(handle)
