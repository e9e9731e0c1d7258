"""``burst.py --profile``: py-spy's folded stacks put in the categories its result reports."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "router"))

import burst_profile  # noqa: E402

LOOP = "_run_module_as_main (<frozen runpy>:198);main (pdserve/router/shell/cli.py:177)"


def test_samples_in_either_servers_loop_runner_are_the_event_loop(tmp_path: Path) -> None:
    # The lean server's loop runner is ``run``, aiohttp's ``run_app``: a sample with nothing
    # above either was in uvloop's C code, whichever front end was sampled.
    (tmp_path / "256-0.txt").write_text(
        f"{LOOP};run (pdserve/router/shell/lean_server.py:372) 6\n"
        f"{LOOP};run_app (aiohttp/web.py:526) 2\n"
        f"{LOOP};run (pdserve/router/shell/lean_server.py:372);_Pipe.__call__ (pdserve/router/shell/relay.py:164) 4\n"
        f"{LOOP};run (pdserve/router/shell/lean_server.py:372);parse_request (pdserve/router/core/requests.py:67)"
        ";HfTokenizer._render (pdserve/tokenization/hf.py:215) 3\n")
    out = burst_profile.profile_summary(tmp_path, "pdserve-lean")
    assert out["samples"] == 15
    assert out["categories_pct"] == {"event loop and sockets (uvloop C)": 53.3,
                                     "relay: per streamed chunk (incl. its socket write)": 26.7,
                                     "chat template render": 20.0}
    assert "pdserve-lean" in out["tool"]
