"""A tiny causal LM and tokenizer made offline, for tests and the CPU recipe.

Nothing is downloaded: the tokenizer is a byte-level BPE trained on the texts given (so a
harness's own prompts compress well), the model a small Llama with random weights. Both are
saved as an ordinary Hugging Face model directory that `transformers` loads by path.

Two chat templates ship with it, in our own markup:
  ROUND_TRIP   every message renders the same wherever it sits, so each call's prompt extends
               the previous prompt + completion (multi-turn samples can be merged).
  DROP_THINK   like Qwen3 without thinking: the generation prompt opens an empty
               <think></think> block that earlier assistant turns are rendered without, so the
               template does not round-trip (the off-policy case the trainer must detect).
Tool calls are <tool_call>{"name": ..., "arguments": {...}}</tool_call>, as many tool-calling
models write them; `{% generation %}` marks assistant tokens for assistant-only losses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and transformers load only when a model is made
    from transformers import PreTrainedTokenizerFast

SPECIAL = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

_TOOLS = (
    "{%- if tools %}<|system|>"
    "{%- if messages and messages[0].role == 'system' %}{{ messages[0].content + '\\n' }}{% endif %}"
    "# Tools{%- for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{%- endfor %}<|end|>"
    "{%- elif messages and messages[0].role == 'system' %}"
    "<|system|>{{ messages[0].content }}<|end|>{%- endif %}"
)
_CALLS = (
    "{%- for call in message.tool_calls or [] %}"
    "{%- set fn = call.function if call.function is defined else call %}"
    '<tool_call>{"name": {{ fn.name | tojson }}, "arguments": '
    "{%- if fn.arguments is string %} {{ fn.arguments }}{%- else %} {{ fn.arguments | tojson }}"
    "{%- endif %}}</tool_call>{%- endfor %}"
)


def _template(assistant_prefix: str, generation_prompt: str) -> str:
    return (
        _TOOLS + "{%- for message in messages %}"
        "{%- if message.role == 'system' %}{%- if not loop.first %}"
        "<|system|>{{ message.content }}<|end|>{%- endif %}"
        "{%- elif message.role == 'user' %}<|user|>{{ message.content }}<|end|>"
        "{%- elif message.role == 'tool' %}<|tool|>{{ message.content }}<|end|>"
        "{%- elif message.role == 'assistant' %}<|assistant|>"
        + assistant_prefix
        + "{% generation %}"
        "{{ message.content or '' }}" + _CALLS + "<|end|>{% endgeneration %}"
        "{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}" + generation_prompt + "{%- endif %}"
    )


ROUND_TRIP = _template("", "<|assistant|>")
# The last assistant turn keeps the empty think block the model was prompted with; earlier ones
# lose it, as Qwen3's template drops reasoning before the last user turn.
DROP_THINK = _template(
    "{%- if loop.last %}<think></think>{%- endif %}", "<|assistant|><think></think>"
)

BASE_CORPUS = [
    "You are a coding agent. Use the bash tool to run shell commands in the workspace.",
    "Create a file hello.txt containing hello. Rename data.csv to data_old.csv.",
    'echo hello > hello.txt && cat hello.txt; ls -la; sed -i "s/foo/bar/g" config.ini',
    '{"name": "bash", "arguments": {"command": "echo hello > hello.txt"}} done.',
    "The quick brown fox jumps over the lazy dog. 0123456789 {}[]()<>=+-*/\\|&;:'\",.?!_~`@#$%^",
]


def make_tokenizer(
    directory: str | os.PathLike[str],
    texts: Iterable[str] = (),
    *,
    vocab_size: int = 2048,
    template: str = ROUND_TRIP,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `texts` (plus a small base corpus) and save it,
    with `template` as its chat template, to `directory`. Returns the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL + MARKUP,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([*BASE_CORPUS, *texts], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|end|>",
        pad_token="<|pad|>",
        additional_special_tokens=MARKUP,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = template
    fast.save_pretrained(str(directory))
    return fast


def make_model(
    directory: str | os.PathLike[str],
    texts: Iterable[str] = (),
    *,
    vocab_size: int = 2048,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 16384,
    template: str = ROUND_TRIP,
    seed: int = 0,
) -> Path:
    """A tiny Llama with random weights and its tokenizer in `directory`, ready for
    `AutoModelForCausalLM.from_pretrained(directory)`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    tokenizer = make_tokenizer(directory, texts, vocab_size=vocab_size, template=template)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(directory))
    (directory / "pomona-tiny.json").write_text(json.dumps({"made_by": "pomona.trainer.tiny"}))
    return directory
