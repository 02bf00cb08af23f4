"""Writes the chat prompts examples/grpo.sx and examples/distill.sx read, and the tokenizers they read them with.

Deterministic (seeded); run it again to remake the files. Each prompt is a
row `{"prompt": [{"role": ..., "content": ...}, ...]}`, rendered through
the chat template in the tokenizer's `tokenizer_config.json` (as
transformers' `apply_chat_template(..., add_generation_prompt=True)`) and
tokenized by the loader; the prompts differ in length, so the loaders pad
them on the left (`:pad-side :left`).

- `bytes-chat/`: a byte-level tokenizer whose ids are the bytes' values
  (0-255, as `text-bytes` reads them: code-lm's vocabulary), and a template
  that writes a conversation as Python comments and prompts with `def `;
  `code-prompts.jsonl` asks for small functions (distill.sx), and
  `code-prompts-held-out.jsonl` holds other draws of them (its held-out pass).
- `hex-chat/`: the 16 hex digits (ids 0-15), a user turn token `<u>` (16)
  and `<pad>` (17), and a template that writes each user turn as `<u>` and
  its digits;
  `count-prompts.jsonl` holds runs of 1 to 5 counting digits (grpo.sx).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

CODE_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user'] %}"
    "{{ raise_exception('a code prompt holds system and user turns, not ' + message['role']) }}"
    "{% endif %}"
    "{{ '# ' + message['content'] | trim + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'def ' }}{% endif %}")

HEX_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'user' %}{{ raise_exception('a counting prompt holds user turns only') }}{% endif %}"
    "{{ '<u>' + message['content'] }}"
    "{% endfor %}")

TASKS = ["read a file", "sum a list", "sort the keys", "join the lines", "parse a number", "open a socket",
         "wait for a task", "close the stream", "return the first item", "count the words in a line",
         "retry a request three times", "cancel every pending task", "write the bytes to a file",
         "check that the path exists", "split a string on commas", "make a new event loop"]
SYSTEM = ["asyncio.", "Be brief.", "No imports."]


def bytes_to_unicode() -> dict[int, str]:
    """The printable character that byte-level BPE (GPT-2's scheme, `tokenizers`' ByteLevel) writes each byte as:
    the printable Latin-1 bytes as themselves, every other byte as the next character from U+0100 on."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in kept:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def byte_tokenizer():
    """A byte-level tokenizer whose id for each byte is its value, with no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def hex_tokenizer():
    """The 16 hex digits, ids 0-15, one a character, `<u>` (16) and `<pad>` (17)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel(vocab={d: i for i, d in enumerate("0123456789abcdef")}, unk_token="0"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken("<u>", special=True), AddedToken("<pad>", special=True)])
    return tok


def write(folder: Path, tok, template: str, **specials) -> None:
    folder.mkdir(exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"chat_template": template, **specials}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


def code_prompts(n: int, rng) -> list:
    rows = []
    for _ in range(n):
        turns = [{"role": "user", "content": str(rng.choice(TASKS))}]
        if rng.random() < 0.4:
            turns.insert(0, {"role": "system", "content": str(rng.choice(SYSTEM))})
        rows.append({"prompt": turns})
    return rows


def count_prompts(n: int, rng) -> list:
    digits = "0123456789abcdef"
    rows = []
    for _ in range(n):
        start, length = int(rng.integers(16)), int(rng.integers(1, 6))
        rows.append({"prompt": [{"role": "user", "content": "".join(digits[(start + k) % 16] for k in range(length))}]})
    return rows


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    write(HERE / "bytes-chat", byte_tokenizer(), CODE_TEMPLATE)
    write(HERE / "hex-chat", hex_tokenizer(), HEX_TEMPLATE, pad_token="<pad>")
    made = (("code-prompts.jsonl", code_prompts(256, rng)), ("count-prompts.jsonl", count_prompts(256, rng)),
            ("code-prompts-held-out.jsonl", code_prompts(64, rng)))
    for name, rows in made:
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
