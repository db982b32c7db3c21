"""slime's custom generate function playing Pomona episodes (trainer/slime_rollout.py): pi plays a
built-in task in a local sandbox, each of its model calls sent as input ids to an SGLang
`/generate` endpoint, the request slime's own `generate` makes. The endpoint is a stand-in
answering in SGLang's shape (`meta_info.output_token_logprobs`) with the suite's tiny model: no
SGLang server can run here. slime is on no registry this machine reaches, so the samples are
checked against `Sample`'s fields as slime's source defines them (test_slime_export.SAMPLE), and
built by slime's own `Sample` when a checkout is given (POMONA_SLIME_SRC=DIR)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from argparse import Namespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from pomona.benchmarks.task import CommandScorer, Task
from pomona.proxy.local_model import LocalModel
from pomona.trainer import slime_rollout
from pomona.trainer.episodes import Filters, load
from tests.trainer.test_slime_export import OTHER_FIELDS, SAMPLE

pytestmark = pytest.mark.timeout(900)

TASK = "files/create-hello"
# what the model was taught: call bash with the command asked for, then say ok
RUN_LS = Task(id="slime/run-ls", instruction="Please run ls.", scorer=CommandScorer("ls", ""))
SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 48}


class SGLangStandIn:
    """POST /generate {input_ids, sampling_params, return_logprob} answered by a LocalModel."""

    def __init__(self, model: LocalModel):
        self.model, self.generated, self.requests = model, [], []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append(body)
                params = body["sampling_params"]
                gen = stand_in.model.generate(
                    body["input_ids"], max_new_tokens=params["max_new_tokens"],
                    temperature=params["temperature"], seed=len(stand_in.generated),
                )  # fmt: skip
                stand_in.generated.append(gen)
                out = json.dumps({"text": stand_in.model.decode(gen.completion_ids), "meta_info": {
                    "output_token_logprobs": [[lp, t, None] for t, lp in
                                              zip(gen.completion_ids, gen.logprobs, strict=True)],
                    "finish_reason": {"type": gen.finish_reason}}}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def sglang(pi_tiny_model: Path):
    server = SGLangStandIn(LocalModel(pi_tiny_model, max_new_tokens=48, device="cpu"))
    yield server
    server.close()


def test_slime_generate_plays_an_episode_into_samples(sglang, pi_tiny_model, gym_state, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(pi_tiny_model))
    runs = tmp_path / "runs"
    url = f"http://127.0.0.1:{sglang.port}/generate"
    with httpx.Client(timeout=300) as client:
        record, rows = asyncio.run(slime_rollout.play(
            RUN_LS, slime_rollout.sglang_generate(url, SAMPLING, client), tokenizer,
            trajectories=str(runs), state_dir=gym_state, timeout=300, max_steps=4,
        ))  # fmt: skip
    assert record.failure_kind == "none" and rows and sglang.generated
    assert all(r["return_logprob"] and r["sampling_params"] == SAMPLING for r in sglang.requests)
    (episode,) = [e for e in load(runs, Filters(include_failed=True)) if e.key == record.episode]
    assert [(t.prompt_ids, t.completion_ids) for t in episode.turns] == [
        (g.prompt_ids, g.completion_ids) for g in sglang.generated
    ]  # every generation a recorded call, token for token
    first = rows[0]
    assert set(first) <= set(SAMPLE) | OTHER_FIELDS
    for name, types in SAMPLE.items():
        assert isinstance(first[name], types), (name, first[name])
    n = first["response_length"]
    assert len(first["loss_mask"]) == len(first["rollout_log_probs"]) == n
    # greedy: a bash call, its output, then "ok": two calls in one conversation (one sample)
    calls = sglang.generated
    assert (len(calls), len(rows)) == (2, 1)
    assert first["tokens"][: len(first["tokens"]) - n] == calls[0].prompt_ids
    glue = len(calls[1].prompt_ids) - len(calls[0].prompt_ids) - len(calls[0].completion_ids)
    # the tool output between the calls masked out
    expected = [1] * len(calls[0].completion_ids) + [0] * glue + [1] * len(calls[1].completion_ids)
    assert glue > 0 and first["loss_mask"] == expected
    trained = [t for t, k in zip(first["tokens"][-n:], first["loss_mask"], strict=True) if k]
    assert trained == [t for g in calls for t in g.completion_ids]
    kept = [lp for lp, k in zip(first["rollout_log_probs"], first["loss_mask"], strict=True) if k]
    assert kept == pytest.approx([lp for g in calls for lp in g.logprobs], abs=1e-6)
    assert first["reward"] == record.reward == episode.reward and first["status"] == "completed"
    assert first["response"] == tokenizer.decode(first["tokens"][-n:])


def dead_port() -> int:
    """A port nothing listens on: the engine is down."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_engine_that_is_down_fails_the_episode_and_gives_no_sample(tiny_model, gym_state,
                                                                     tmp_path):  # fmt: skip
    from transformers import AutoTokenizer

    url = f"http://127.0.0.1:{dead_port()}/generate"
    with httpx.Client(timeout=30) as client:
        record, rows = asyncio.run(slime_rollout.play(
            TASK, slime_rollout.sglang_generate(url, SAMPLING, client),
            AutoTokenizer.from_pretrained(str(tiny_model)), trajectories=str(tmp_path / "runs"),
            state_dir=gym_state, timeout=300, max_steps=4,
        ))  # fmt: skip
    assert (record.failure_kind, record.reward, rows) == ("upstream", None, [])
    assert "ConnectError" in (record.failure_message or "")


@pytest.mark.skipif(not os.environ.get("POMONA_SLIME_SRC"),
                    reason="no slime checkout given (POMONA_SLIME_SRC=DIR): slime is not on any "
                           "registry this machine reaches")  # fmt: skip
def test_slime_generate_returns_slimes_own_samples(sglang, pi_tiny_model, gym_state, tmp_path):
    sys.path.insert(0, os.environ["POMONA_SLIME_SRC"])
    try:
        from slime.utils.types import Sample
    finally:
        sys.path.pop(0)
    args = Namespace(hf_checkpoint=str(pi_tiny_model), sglang_router_ip="127.0.0.1",
                     sglang_router_port=sglang.port, pomona_trajectories=str(tmp_path / "runs"),
                     pomona_state_dir=gym_state, pomona_timeout=300, pomona_max_steps=4)  # fmt: skip
    sample = Sample(group_index=3, index=7, prompt="create hello.txt", label="x",
                    metadata={"task": TASK}, session_id="s")  # fmt: skip
    out = asyncio.run(slime_rollout.generate(args, sample, dict(SAMPLING)))
    assert out and all(type(s) is Sample for s in out)
    for s in out:
        assert (s.group_index, s.index, s.session_id, s.label) == (3, 7, "s", "x")
        assert s.status == Sample.Status.COMPLETED and s.metadata["task"] == TASK
        assert len(s.loss_mask) == s.response_length == len(s.rollout_log_probs)
    trained = [t for t, k in zip(out[0].tokens[-out[0].response_length :], out[0].loss_mask,
                                 strict=True) if k]  # fmt: skip
    assert trained[: len(sglang.generated[0].completion_ids)] == sglang.generated[0].completion_ids

    # the engine down: the sample itself comes back failed, its loss masked by slime
    args.sglang_router_port = dead_port()
    failed = Sample(index=8, prompt="create hello.txt", metadata={"task": TASK})
    back = asyncio.run(slime_rollout.generate(args, failed, dict(SAMPLING)))
    assert back is failed and back.remove_sample and back.reward == 0.0
    assert back.status == Sample.Status.FAILED and back.metadata["pomona_failure"] == "upstream"
