"""Training on the CPU: SFT with TRL's SFTTrainer on an exported set, and a policy-gradient step
on token-level RL samples.

    losses = sft("out/sft-trl", "tiny-model", "tiny-sft", steps=50)
    before, after = policy_gradient_step(model, rl_samples, lr=1e-3)

The policy-gradient step is REINFORCE with the samples' advantages: the loss is
-sum_s A_s * mean over the s's trainable tokens of log pi(token | prefix), so a small step
raises sum_s A_s * log pi(s): completions with positive advantage gain log-probability on those
with negative advantage. Each one alone can move either way (completions that share tokens, such
as a tool call's markup, share their gradient). It uses the recorded tokens as they are (no
re-rendering), which is what keeps it on-policy.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pomona.errors import NoData, UsageError


@dataclass
class SFTResult:
    output_dir: Path
    losses: list[float]  # the training loss at each logged step
    steps: int


def load_sft_dataset(path: str | os.PathLike[str]) -> Any:
    """An exported SFT set (hf, trl, verl, slime or orchard format) as a `datasets.Dataset`
    with `messages` and `tools` (JSON text), which is what SFTTrainer takes."""
    import datasets

    path = Path(path)
    manifest = path / "pomona-export.json"
    fmt = json.loads(manifest.read_text())["format"] if manifest.exists() else None
    if fmt == "hf" or (path / "dataset_info.json").exists():
        ds = datasets.load_from_disk(str(path))
    elif fmt == "orchard":
        from pomona.trainer import orchard

        return orchard.to_dataset(path / "train.parquet")
    elif (path / "train.jsonl").exists():
        ds = datasets.load_dataset("json", data_files=str(path / "train.jsonl"), split="train")
    elif (path / "train.parquet").exists():
        ds = datasets.load_dataset("parquet", data_files=str(path / "train.parquet"), split="train")
    else:
        raise NoData(
            f"no exported SFT set in {path} (train.jsonl, train.parquet or a saved dataset)"
        )
    if "tools" in ds.column_names and not isinstance(ds[0]["tools"], str):
        ds = ds.map(lambda r: {"tools": json.dumps(r["tools"])})
    return ds.select_columns([c for c in ("messages", "tools") if c in ds.column_names])


def sft(
    data: Any,
    model: Any,
    output_dir: str | os.PathLike[str],
    *,
    tokenizer: Any = None,
    steps: int = 50,
    learning_rate: float = 3e-3,
    batch_size: int = 2,
    max_length: int | None = 4096,
    assistant_only_loss: bool | None = None,
    seed: int = 0,
    save: bool = True,
) -> SFTResult:
    """Fine-tune `model` (a model directory, or a loaded model with its `tokenizer`) on `data`
    (an exported set's path or a Dataset) with TRL's SFTTrainer on the CPU, save the result to
    `output_dir` (unless `save=False`: an in-process model is trained in place), and return the
    losses. Conversational data is trained on assistant tokens through the template's
    `{% generation %}` marks; tokenized data (`input_ids`, `assistant_masks`) on its masks."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import SFTConfig, SFTTrainer

    dataset = load_sft_dataset(data) if isinstance(data, str | os.PathLike) else data
    if isinstance(model, str | os.PathLike):
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(str(model))
        model = AutoModelForCausalLM.from_pretrained(str(model))
    if assistant_only_loss is None:
        assistant_only_loss = "input_ids" not in dataset.column_names
    config = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        max_length=max_length,
        assistant_only_loss=assistant_only_loss,
        seed=seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.remove_callback(PrinterCallback)  # the losses come back in the result instead
    trainer.train()
    if save:
        trainer.save_model(str(output_dir))
        tokenizer.save_pretrained(str(output_dir))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return SFTResult(Path(output_dir), losses, trainer.state.global_step)


def sequence_logprob(model: Any, input_ids: Sequence[int], loss_mask: Sequence[int]) -> Any:
    """The mean log-probability of the trainable tokens of one sample (a differentiable scalar)."""
    import torch

    ids = torch.tensor([list(input_ids)])
    logits = model(input_ids=ids).logits[0, :-1].float()
    targets = ids[0, 1:]
    logp = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
    mask = torch.tensor(list(loss_mask[1:]), dtype=logp.dtype)
    if mask.sum() == 0:
        raise UsageError("the sample has no trainable token")
    return (logp * mask).sum() / mask.sum()


def policy_gradient_step(
    model: Any,
    samples: Sequence[tuple[Sequence[int], Sequence[int], float]],
    *,
    lr: float = 1e-3,
) -> tuple[list[float], list[float]]:
    """One REINFORCE update over (input_ids, loss_mask, advantage) samples. Returns each
    sample's mean trainable-token log-probability before and after the update."""
    import torch

    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    before = []
    loss = torch.zeros(())
    for ids, mask, advantage in samples:
        lp = sequence_logprob(model, ids, mask)
        before.append(float(lp.detach()))
        loss = loss - advantage * lp
    (loss / max(len(samples), 1)).backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        after = [float(sequence_logprob(model, ids, mask)) for ids, mask, _ in samples]
    return before, after
