"""Runs in verl's own venv (tests/trainer/verl_venv.sh): verl's AgentLoopWorker with Pomona's
PomonaAgentLoop playing a task with pi in a local sandbox, printing what verl batched and what
the model generated as one JSON line for test_verl_agent_loop.py to judge.

    verl_play.py '{"model": DIR, "task": {"id", "instruction"}, "scorer": {"check", "expected"},
                   "state_dir": DIR, "runs": DIR, "data": PARQUET, "reward": PY_FILE}'

The task is given to the loop in its agent-loop config, as hydra objects (`tasks`).

The server manager is a stand-in: verl's own is a client of vLLM or SGLang servers that verl
starts on GPUs with Ray, and none can run on this machine. The stand-in keeps the interface the
agent loops call (`await generate(request_id, prompt_ids=, sampling_params=) -> TokenOutput`,
verl's own TokenOutput) and samples with a real model (the suite's tiny model, by
transformers), recording every generation for the test to compare with what verl trains.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from omegaconf import OmegaConf


class LocalServerManager:
    """verl's server-manager interface answered by a transformers model in this process (see
    above; not Pomona's LocalModel, which needs the project's newer transformers)."""

    def __init__(self, path: str, max_new_tokens: int = 48):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.max_new_tokens = max_new_tokens
        self.generated: list[dict[str, Any]] = []
        self.sampling: list[dict[str, Any]] = []

    def _sample(self, prompt_ids: list[int], temperature: float, seed: int) -> tuple[list, list]:
        import torch

        torch.manual_seed(seed)
        inputs = torch.tensor([prompt_ids])
        with torch.no_grad():
            out = self.model.generate(
                inputs, attention_mask=torch.ones_like(inputs), do_sample=temperature > 0,
                temperature=temperature or None, top_k=0, max_new_tokens=self.max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True, output_logits=True,
            )  # fmt: skip
        ids = out.sequences[0, len(prompt_ids) :].tolist()
        logprobs = [float(torch.log_softmax(step[0].float(), -1)[t])
                    for step, t in zip(out.logits, ids, strict=False)]  # fmt: skip
        return ids, logprobs

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        ids, logprobs = await asyncio.to_thread(
            self._sample, list(prompt_ids), float(sampling_params.get("temperature", 1.0)),
            len(self.generated),
        )  # fmt: skip
        self.sampling.append(dict(sampling_params))
        self.generated.append({"prompt_ids": list(prompt_ids), "token_ids": ids,
                               "log_probs": logprobs})  # fmt: skip
        return TokenOutput(token_ids=ids, log_probs=logprobs)


def main() -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.ray_utils import get_event_loop
    from verl_check import trainer_config

    config = json.loads(sys.argv[1])
    loops = os.path.join(config["runs"], "agent_loops.yaml")
    OmegaConf.save(OmegaConf.create([{
        "name": "pomona", "_target_": "pomona.trainer.verl_agent_loop.PomonaAgentLoop",
        "harness": "pi", "trajectories": config["runs"], "state_dir": config["state_dir"],
        "timeout": 300, "max_steps": 4, "_convert_": "all",
        "tasks": [{"_target_": "pomona.benchmarks.task.Task", **config["task"], "scorer": {
            "_target_": "pomona.benchmarks.task.CommandScorer", **config["scorer"]}}],
    }]), loops)  # fmt: skip
    cfg = trainer_config({**config, "reward": ""})
    rollout = cfg.actor_rollout_ref.rollout
    rollout.calculate_log_probs, rollout.temperature = True, 0.0
    rollout.prompt_length, rollout.response_length = 8192, 4096  # pi's system prompt: ~4k tokens
    rollout.agent.default_agent_loop, rollout.agent.agent_loop_config_path = "pomona", loops
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config["model"])
    data = RLHFDataset(config["data"], tokenizer, OmegaConf.create(
        {"max_prompt_length": 2048, "filter_overlong_prompts_workers": 1}))  # fmt: skip
    batch = DataProto.from_single_dict(collate_fn([data[i] for i in range(len(data))]))
    server = LocalServerManager(config["model"])
    worker = AgentLoopWorker(cfg, llm_client=server)
    out = get_event_loop().run_until_complete(worker.generate_sequences(batch))
    b, nt = out.batch, out.non_tensor_batch
    width = b["prompts"].shape[1]
    attention = b["attention_mask"][0].tolist()
    n = sum(attention[width:])
    print(json.dumps({
        "prompt_ids": [t for t, a in zip(b["prompts"][0].tolist(), attention[:width], strict=True) if a],
        "response_ids": b["responses"][0].tolist()[:n],
        "response_mask": b["response_mask"][0].tolist()[:n],
        "rollout_log_probs": b["rollout_log_probs"][0].tolist()[:n]
        if "rollout_log_probs" in b else None,
        "rm_scores": b["rm_scores"][0].tolist()[:n], "num_turns": int(nt["__num_turns__"][0]),
        "episode": nt["pomona_episode"][0], "branches": int(nt["pomona_branches"][0]),
        "failure": nt["pomona_failure"][0] if "pomona_failure" in nt else None,
        "generated": server.generated, "sampling": server.sampling,
    }))  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
