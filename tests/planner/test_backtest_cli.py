import json
import math

import pytest

from pdserve.planner.shell.backtest import backtest, interval_rates
from pdserve.planner.shell.cli import main


def test_interval_rates():
    assert interval_rates([0, 1, 2, 10, 11, 25], 10) == [0.3, 0.2]
    assert interval_rates([], 10) == []
    with pytest.raises(ValueError, match="interval must be > 0"):
        interval_rates([1.0], 0)


def test_backtest_ranks_trend_models_on_a_ramp():
    rates = [1.0 + 0.5 * i for i in range(30)]
    res = {r.predictor: r for r in backtest(rates, ["constant", "holt-winters"])}
    assert res["holt-winters"].rmse < res["constant"].rmse
    assert res["constant"].rmse == pytest.approx(0.5)
    assert res["constant"].n == 25 and res["constant"].exploded == 0
    with pytest.raises(ValueError, match="need more than 5 intervals"):
        backtest([1.0] * 5)


def azure_csv(path, n=600):
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):  # a rate that doubles halfway through, 10 minutes
        t = i * (1.0 if i < n // 3 else 0.5)
        lines.append(f"2023-11-16 18:{15 + int(t // 60):02d}:{t % 60:010.7f},{100 + i},{20}")
    path.write_text("\n".join(lines) + "\n")


def test_backtest_cli_writes_json(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    azure_csv(trace)
    out = tmp_path / "bt.json"
    assert main(["backtest", "--trace", str(trace), "--interval", "30", "--predictors", "constant", "arima",
                 "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["intervals"] > 5 and [r["predictor"] for r in data["results"]] == ["constant", "arima"]
    assert all(math.isfinite(r["rmse"]) for r in data["results"])
    assert "MAPE" in capsys.readouterr().out


def test_cli_errors_are_clear(tmp_path, capsys):
    assert main(["backtest", "--trace", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    rc = main(["run", "--actuator", "static", "--prefill-min", "3", "--prefill-max", "2", "--scrape", "http://x"])
    assert rc == 2 and "prefill min 3 > max 2" in capsys.readouterr().err


def test_cli_run_static_against_a_metrics_endpoint(planner_cli):
    rows = planner_cli(3)
    assert len(rows) == 3
    assert rows[0]["held"] and rows[0]["holdReason"] == "missing-data"  # one scrape: no rates yet
    assert not rows[-1]["held"]  # idle but healthy: a real decision (rate 0)


def test_worker_speedup_is_read_from_worker_flags():
    from pdserve.planner.shell.cli import _worker_speedup

    assert _worker_speedup(["--host=x", "--mock-speedup=25"]) == 25.0
    assert _worker_speedup(["--mock-speedup", "4"]) == 4.0
    assert _worker_speedup([]) == 1.0
