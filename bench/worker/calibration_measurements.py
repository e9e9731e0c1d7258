"""One row per DISTINCT published measurement behind the engine-model calibration.

``calibration.py`` replays each published setup through the engine model and lists its
checks per run; several of those are the same measurement seen again (the three Lambda
H100 runs send the same 10 prompts with only ``--max-model-len`` changed, so the model
replays them identically and the three published values are repeats of one setup). This
module folds them: a repeated setup is one row with the median and range of its repeats,
and each row says what it was used for:

* ``set``: a parameter of the profile was chosen with it (in-sample; agreement there is
  not evidence of accuracy, only of a fit),
* ``held out``: no parameter was chosen with it (evidence),
* ``informational``: shown, with the reason it cannot judge the model.

The roles are stated here from the calibration's history (bench/worker/README.md); they
are data, not computed, and a reviewer should read them as the claim they are.
"""

from __future__ import annotations

import statistics
from typing import Any


def _fold(values: list[float]) -> dict[str, float | int]:
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def distinct_measurements(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows from calibration.py's results dict (the JSON it writes)."""
    rows: list[dict[str, Any]] = []
    src = {s["id"]: s for s in r["h100_sources"]}
    by_metric: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in r["h100_checks"]:
        group = "lambda-h100-llama-3-8b" if c["source"].startswith("lambda-h100-len") else c["source"]
        by_metric.setdefault((group, c["metric"]), []).append(c)
    roles = {
        ("vllm-ci-latency", "mean_latency_ms"): (
            "set", "mbu and the step overhead were chosen with it. Cited source: a Buildkite page of another project "
                   "(elastic/enterprise-search-ruby build 571) holding a copy of vLLM's performance report, not a vLLM page"),
        ("lambda-h100-llama-3-8b", "mean_ttft_ms"): (
            "set", "mfu was chosen with it, and the front-end term was added to the model after these points missed "
                   "by -34 %; its value comes from the two Mistral rows, but the structure was chosen on these"),
        ("lambda-h100-llama-3-8b", "median_tpot_ms"): ("set", "mbu was chosen with it"),
        ("lambda-h100-llama-3-8b", "duration_s"): ("set", "mostly decode steps: follows the TPOT fit"),
    }
    for (group, metric), checks in by_metric.items():
        role, why = roles.get((group, metric), ("held out", ""))
        pub = _fold([float(c["published"]) for c in checks])
        model = statistics.median(float(c["model"]) for c in checks)
        first = src[checks[0]["source"]]
        rows.append({
            "measurement": f"{group}: {metric}", "setup": first["setup"], "source": first["url"],
            "repeats": pub["n"], "published": pub, "model": model,
            "error": model / float(pub["median"]) - 1, "role": role, "why": why,
            "distinct_predictions": len({round(float(c["model"]), 6) for c in checks}),
        })
    for h in r["frontend_holdout"]["rows"]:
        rows.append({
            "measurement": f"{h['id']}: mean_ttft_ms", "setup": f"{h['model']}, same H100 campaign and prompts",
            "source": h["url"], "repeats": 1, "published": _fold([h["published_ttft_ms"]]),
            "model": h["model_gpu_ttft_ms"], "error": None, "role": "set",
            "why": f"sets frontend_latency_s: published TTFT - model GPU step = {h['frontend_ms']:.1f} ms "
                   "(averaged over both rows)", "distinct_predictions": 1,
        })
    for c in r["checks"]:
        rows.append({
            "measurement": c["check"], "setup": r["published"]["setup"], "source": r["published"]["source"],
            "repeats": 1, "published": _fold([c["published"]]), "model": c["model"], "error": c["error"],
            "role": "held out", "why": "a blog's sweep of vLLM 0.23 (not a vLLM page); no value of the A100 profile "
                                       "was solved for it", "distinct_predictions": 1,
        })
    a = r["cross_checks"]["a100_80gb"]
    for metric, pub, model, err in (("mean TTFT ms", a["published_ttft_ms"], a["model_ttft_ms"], a["ttft_error"]),
                                    ("median TPOT ms", a["published_tpot_ms"], a["model_tpot_ms"], a["tpot_error"])):
        rows.append({
            "measurement": f"lambda-a100-80gb-llama-3-8b: {metric}", "setup": "same 10 prompts on 1x A100-80GB SXM",
            "source": a["url"], "repeats": 1, "published": _fold([pub]), "model": model, "error": err,
            "role": "held out", "why": "the 8B A100 profile with the 80GB part's bandwidth + the 22 ms front-end",
            "distinct_predictions": 1,
        })
    for v in r["cross_checks"]["vidur"]:
        rows.append({
            "measurement": f"vidur-h100-layer: {v['tokens']} tokens", "setup": "Vidur's H100 operator profile "
            "(one Llama-2-7B layer's GEMMs)", "source": r["cross_checks"]["vidur_url"], "repeats": 1,
            "published": _fold([v["layer_ms"]]), "model": v["layer_ms"] * (1 + v["model_time_over_measured"]),
            "error": v["model_time_over_measured"],
            "role": "held out", "why": "operator timings, not vLLM end to end: checks the mfu at this "
                                       "step size (model: the same layer's GEMMs at the profile's mfu)", "distinct_predictions": 1,
        })
    info = r["h100_informational"]
    rows.append({
        "measurement": f"{info['id']}: TPOT ms", "setup": info["setup"], "source": info["url"], "repeats": 1,
        "published": _fold([info["published_tpot_ms"]]), "model": info["model_tpot_ms"], "error": info["error"],
        "role": "informational", "why": "vLLM v0.5's engine before the v0.6 rewrite, light load of unstated shape",
        "distinct_predictions": 1,
    })
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    held = [x for x in rows if x["role"] == "held out" and x["error"] is not None]
    return {
        "distinct_measurements": len(rows),
        "used_to_set_parameters": sum(1 for x in rows if x["role"] == "set"),
        "held_out": len(held),
        "held_out_within_30pct": sum(1 for x in held if abs(x["error"]) <= 0.30),
        "held_out_errors": sorted(round(x["error"], 3) for x in held),
        "informational": sum(1 for x in rows if x["role"] == "informational"),
    }


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    s = summary(rows)
    out = ["## Distinct published measurements (one row each; repeats folded)", "",
           f"{s['distinct_measurements']} distinct measurements: {s['used_to_set_parameters']} used to set a parameter "
           f"(in-sample), {s['held_out']} held out ({s['held_out_within_30pct']} within 30 %), "
           f"{s['informational']} informational.", "",
           "| measurement | repeats | published (median [range]) | model | error | role | why |",
           "|---|---:|---|---:|---:|---|---|"]
    for x in rows:
        p = x["published"]
        pub = f"{p['median']:.4g}" + (f" [{p['min']:.4g}..{p['max']:.4g}]" if p["n"] > 1 else "")
        model = "" if x["model"] is None else f"{x['model']:.4g}"
        err = "" if x["error"] is None else f"{100 * x['error']:+.1f} %"
        out.append(f"| [{x['measurement']}]({x['source'].split(' ')[0]}) | {x['repeats']} | {pub} | {model} | {err} | "
                   f"{x['role']} | {x['why']} |")
    return out + [""]
