"""The one `pdserve` command.

Each subcommand lives in its own module with a ``main(argv) -> int`` and is
imported only when it runs, so ``pdserve worker`` does not pay for kopf or
statsmodels at start-up and one area's import error cannot break another's.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "crd": ("pdserve.api.cli", "generate the DisaggregatedService CRD YAML from the models"),
    "dashboard": ("pdserve.dashboard.cli", "generate the Grafana dashboard JSON (grafana-foundation-sdk)"),
    "operator": ("pdserve.operator.cli", "run the kopf operator (reconciles DisaggregatedServices)"),
    "worker": ("pdserve.worker.cli", "run a mock vLLM worker (vllm serve flags, no GPU)"),
    "router": ("pdserve.router.shell.cli", "run the KV-aware prefill/decode router"),
    "planner": ("pdserve.planner.shell.cli", "run the forecasting planner, or backtest its predictors"),
    "profile": ("pdserve.planner.shell.profile_cli", "measure or derive a capacity profile"),
    "sim": ("pdserve.sim.cli", "replay a trace in the discrete-event simulator"),
    "advise": ("pdserve.sim.advise_cli", "rank colocated / chunked / xPyD configurations for a trace"),
    "demo": ("pdserve.demo.cli", "run the whole loop locally on mock workers"),
}


def _usage() -> str:
    width = max(len(n) for n in SUBCOMMANDS)
    lines = ["usage: pdserve <command> [options]", "", "commands:"]
    for name, (_, help_) in SUBCOMMANDS.items():
        lines.append(f"  {name.ljust(width)}  {help_}")
    lines += ["", "Run `pdserve <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from pdserve import __version__

        print(f"pdserve {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"pdserve: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
