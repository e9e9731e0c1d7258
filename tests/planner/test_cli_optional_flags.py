"""``pdserve planner run``'s number-or-'none' policy flags: each one's default is the policy's, 'none' (any case)
reads as None and a number as that number, a bad number is refused, and all of them at 'none' make a policy that
decides (thirteen floats since --scale-down-clear-fraction / -quantile; one count since session 44, when
--release-only-cleared-max-replicas got a default other than 'none'). Which PolicyConfig field each parsed value reaches: test_cli_policy_config.py."""

from __future__ import annotations

import pytest

from pdserve.planner.core.policy import PolicyConfig
from pdserve.planner.shell.cli import build_parser
from tests.planner.test_cli_policy_config import FLAGS


def _run_action(flag: str):
    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    run = sub.choices["run"]
    return next(a for a in run._actions if flag in a.option_strings)


# flag -> the PolicyConfig field it sets: the flags of test_cli_policy_config's table whose help offers 'none'
OPTIONAL = {argv[0]: field for argv, (field, _) in FLAGS.items()
            if not argv[0].startswith("--no-") and "'none': " in (_run_action(argv[0]).help or "")}


# the ones that take a count, not a fraction
COUNTS = {"--release-only-cleared-max-replicas"}


def test_the_optional_flags_are_the_fourteen() -> None:
    assert set(OPTIONAL) == {"--burst-budget", "--burst-fit-budget", "--burst-absorb-fraction", "--burst-level-ratio",
                             "--burst-miss-budget", "--lone-burst-s", "--prefill-utilization",
                             "--prefill-ratio-floor", "--correction-backlog-s",
                             "--ramp-projection-s", "--decode-link-release", "--scale-down-clear-fraction",
                             "--scale-down-clear-quantile", "--release-only-cleared-max-replicas"}


@pytest.mark.parametrize("flag,field", OPTIONAL.items())
def test_default_none_and_number(flag: str, field: str) -> None:
    parser = build_parser()
    dest = _run_action(flag).dest
    assert getattr(parser.parse_args(["run"]), dest) == getattr(PolicyConfig, field)
    assert getattr(parser.parse_args(["run", flag, "None"]), dest) is None
    number, value = ("2", 2) if flag in COUNTS else ("0.5", 0.5)
    assert getattr(parser.parse_args(["run", flag, number]), dest) == value
    assert "'none': " in (_run_action(flag).help or "")


def test_a_bad_number_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--prefill-ratio-floor", "half"])
    assert exc.value.code == 2 and "--prefill-ratio-floor" in capsys.readouterr().err


def test_all_at_none_make_a_policy_that_decides(planner_cli) -> None:
    # every optional flag at 'none' at once: a valid policy (none of them needs another), decisions made
    rows = planner_cli(2, *(x for flag in OPTIONAL for x in (flag, "none")))
    assert len(rows) == 2 and not rows[1]["held"]
