"""Runs in verl's own venv (tests/trainer/verl_venv.sh): verl's loaders and worker on Pomona's
verl exports, printing what they made as one JSON line for test_verl_export.py to judge.

    verl_check.py '{"model": DIR, "sft_models": [DIR, ...], "sft": PARQUET, "rl": PARQUET,
                    "reward": PY_FILE}'

- sft: verl's MultiTurnSFTDataset (each message rendered alone and checked against the whole
  conversation rendered at once) with each of sft_models' tokenizers: input_ids and loss_mask
  per row.
- rl: verl's RLHFDataset and collate_fn, then verl's AgentLoopWorker.generate_sequences with
  Pomona's RecordedAgentLoop as the agent loop (verl's own padding, masks and rm_scores), then
  verl's NaiveRewardManager with the export's reward function loaded the way verl loads one.
"""

from __future__ import annotations

import json
import os
import sys

from omegaconf import OmegaConf


def sft(config: dict, model: str) -> list[dict]:
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    tokenizer = AutoTokenizer.from_pretrained(model)
    data = MultiTurnSFTDataset(
        config["sft"], tokenizer, {"pad_mode": "no_padding", "max_length": 65536}
    )
    return [{"input_ids": r["input_ids"].tolist(), "loss_mask": r["loss_mask"].tolist()}
            for r in (data[i] for i in range(len(data)))]  # fmt: skip


def trainer_config(config: dict) -> object:
    import verl

    root = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    cfg = OmegaConf.load(os.path.join(root, "_generated_ppo_trainer.yaml"))
    cfg.actor_rollout_ref.model.path = config["model"]
    rollout = cfg.actor_rollout_ref.rollout
    rollout.name, rollout.prompt_length, rollout.response_length = "vllm", 2048, 2048
    rollout.agent.default_agent_loop = "pomona_recorded"
    cfg.reward.custom_reward_function.path = config["reward"]
    cfg.reward.custom_reward_function.name = "compute_score"
    return cfg


def rl(config: dict, tokenizer: object) -> dict:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.ray_utils import get_event_loop

    import pomona.trainer.verl_agent_loop  # noqa: F401  (registers pomona_recorded)

    cfg = trainer_config(config)
    data = RLHFDataset(config["rl"], tokenizer, OmegaConf.create(
        {"max_prompt_length": 2048, "filter_overlong_prompts_workers": 1}))  # fmt: skip
    batch = DataProto.from_single_dict(collate_fn([data[i] for i in range(len(data))]))
    worker = AgentLoopWorker(cfg, llm_client=None)
    out = get_event_loop().run_until_complete(worker.generate_sequences(batch))
    b = out.batch
    prompt_width = b["prompts"].shape[1]
    rows = []
    for i in range(len(out)):
        attention = b["attention_mask"][i].tolist()
        prompt = [
            t for t, a in zip(b["prompts"][i].tolist(), attention[:prompt_width], strict=True) if a
        ]
        n = sum(attention[prompt_width:])
        rows.append({
            "prompt_ids": prompt, "response_ids": b["responses"][i].tolist()[:n],
            "response_mask": b["response_mask"][i].tolist()[:n],
            "rollout_log_probs": b["rollout_log_probs"][i].tolist()[:n],
            "rm_scores": b["rm_scores"][i].tolist()[:n],
            "episode": out.non_tensor_batch["extra_info"][i]["episode"],
            "branch": int(out.non_tensor_batch["extra_info"][i]["branch"]),
        })  # fmt: skip
    score = get_custom_reward_fn(cfg)
    manager = NaiveRewardManager(cfg, tokenizer, compute_score=score)
    scores = [manager.loop.run_until_complete(manager.run_single(out[i : i + 1]))["reward_score"]
              for i in range(len(out))]  # fmt: skip
    return {"rows": rows, "reward_fn_scores": scores, "refusals": refusals(cfg, batch, score)}


def refusals(cfg: object, batch: object, score: object) -> dict:
    """What the agent loop and the reward function say to what they must not take."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.ray_utils import get_event_loop

    out = {}
    cfg.actor_rollout_ref.rollout.prompt_length = 8  # shorter than every recorded prompt
    try:
        get_event_loop().run_until_complete(
            AgentLoopWorker(cfg, llm_client=None).generate_sequences(batch)
        )
    except Exception as e:  # noqa: BLE001 (reported to the test, which judges it)
        out["short_prompt_length"] = f"{type(e).__name__}: {e}"
    try:
        score(data_source="files", solution_str="done", ground_truth="resolved", extra_info={})
    except Exception as e:  # noqa: BLE001
        out["string_ground_truth"] = f"{type(e).__name__}: {e}"
    return out


def main() -> None:
    from transformers import AutoTokenizer

    config = json.loads(sys.argv[1])
    tokenizer = AutoTokenizer.from_pretrained(config["model"])
    import transformers
    import verl

    result = {"verl": verl.__version__, "transformers": transformers.__version__,
              "sft": [sft(config, m) for m in config["sft_models"]], "rl": rl(config, tokenizer)}  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
