"""The failure kind comes from effects (recorded calls, the harness's own account), not from the
exit code: pi exits 0 on a dead upstream, Codex exits 0 on a failed command."""

from __future__ import annotations

from pomona.harnesses.base import Outputs
from pomona.harnesses.runner import judge
from pomona.proxy.control import RecordedCall

OK = RecordedCall(False, "ok", "chat", "/e/k/v1/chat/completions", 200)
SIDE = RecordedCall(True, "ok", "chat", "/e/k/v1/chat/completions", 200)
DEAD = RecordedCall(False, "upstream_error", "chat", "/e/k/v1/chat/completions", 502)
REFUSED = RecordedCall(False, "refused", "chat", "/e/k/v1/chat/completions", 410)


def out(exit_code: int = 0, stderr: str = "") -> Outputs:
    return Outputs("", stderr, exit_code, {})


def test_completed_turn_is_success_whatever_the_exit_code() -> None:
    assert judge(False, True, [OK, OK], 2, out(1))[0] == "none"


def test_exit_zero_without_a_finished_turn_is_a_harness_failure() -> None:
    assert judge(False, False, [OK], 1, out(0))[0] == "harness"


def test_timeout() -> None:
    assert judge(True, False, [OK], 1, out(-9))[0] == "timeout"


def test_dead_upstream_wins_over_exit_code_and_timeout() -> None:
    assert judge(False, False, [DEAD, DEAD], 2, out(0))[0] == "upstream"
    assert judge(True, False, [OK, DEAD], 2, out(-9))[0] == "upstream"
    assert judge(False, True, [OK, DEAD], 2, out(0))[0] == "upstream"


def test_upstream_error_earlier_then_recovered_is_success() -> None:
    assert judge(False, True, [DEAD, OK, OK, SIDE], 4, out(0))[0] == "none"


def test_refused_by_proxy() -> None:
    assert judge(False, False, [OK, REFUSED], 2, out(1))[0] == "proxy"


def test_no_call_reached_the_proxy() -> None:
    assert judge(False, False, [], 0, out(1, "connect ECONNREFUSED 127.0.0.1:4000"))[0] == "proxy"
    assert judge(False, False, [], 0, out(127, "pi: not found"))[0] == "harness"


def test_a_conversation_that_outgrew_the_models_context_is_graded_not_infra() -> None:
    """The episode's own end (its policy made it too long), however the harness then exited:
    counting it as an upstream failure would drop a failed episode from the success rate."""
    full = RecordedCall(False, "context_exceeded", "chat", "/e/k/v1/chat/completions", 400)
    assert judge(False, False, [OK, OK, full], 3, out(1)) == ("none", None)
    assert judge(True, False, [OK, full, full], 3, out(-9)) == ("none", None)


def test_mini_swe_agent_ending_on_the_models_behaviour_is_graded_not_infra() -> None:
    """mini-swe-agent's own account (traj.json's exit_status) says why it stopped: a model that
    never writes a valid call (RepeatedFormatError, what SmolLM2 does) or runs out of steps ended
    the episode itself; an API exception did not."""
    import json

    from pomona.harnesses.mini_swe_agent import HARNESS

    def ended(status: str) -> Outputs:
        traj = {"info": {"exit_status": status, "submission": ""}, "messages": []}
        return Outputs("", "", 0, {"traj.json": json.dumps(traj).encode()})

    for status in ("Submitted", "RepeatedFormatError", "LimitsExceeded"):
        assert judge(False, HARNESS.completed(ended(status)), [OK] * 3, 3, ended(status)) == (
            "none",
            None,
        ), status
    for status in ("APIConnectionError", "TimeExceeded"):
        assert not HARNESS.completed(ended(status))
    assert not HARNESS.completed(Outputs("", "", 0, {}))  # no trajectory at all
    assert HARNESS.final_answer(ended("RepeatedFormatError")) is None  # nothing was submitted
