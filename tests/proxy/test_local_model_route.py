"""A `transformers/<model dir>` route: the proxy starts the local model server on first use and
reaches it like a vLLM upstream, so every caller dialect gets recorded token ids."""

from __future__ import annotations

import anthropic
import openai
import pytest
from proxy_helpers import calls

from pomona.proxy import ProxyConfig, ProxyServer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from pomona.trainer.tiny import make_model

    return make_model(tmp_path_factory.mktemp("tiny") / "m", ["hello there, run ls"])


def test_every_dialect_gets_token_ids_from_a_local_model(model_dir, tmp_path):
    runs = tmp_path / "runs"
    route = {"model_name": "tiny", "litellm_params": {"model": f"transformers/{model_dir}"}}
    with ProxyServer(ProxyConfig.from_model_list([route], trajectories=runs)) as proxy:
        ep = proxy.open_episode()
        chat = openai.OpenAI(base_url=ep["base_url"], api_key="k", timeout=300)
        chat.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        claude = anthropic.Anthropic(base_url=ep["anthropic_base_url"], api_key="k", timeout=300)
        claude.messages.create(
            model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hello"}]
        )
    rows = calls(runs, 2, episode=ep["key"])
    assert [(r["dialect"], r["upstream"], r["status"]) for r in rows] == [
        ("chat", "passthrough", "ok"),
        ("anthropic", "litellm", "ok"),
    ]
    for row in rows:
        assert row["prompt_token_ids"] and row["completion_token_ids"]
        assert len(row["completion_logprobs"]) == len(row["completion_token_ids"])
