"""Writes examples/data/sums.npz and sums-tokenizer.json for examples/grpo-python.sx.

`sums.npz` holds every prompt `a+b=` of two digits (100 rows, shuffled with a fixed seed) as token ids in
the field `prompt` [4] i32; `sums-tokenizer.json` is a character-level Hugging Face tokenizer whose 12
tokens are `0`..`9` (ids 0 to 9), `+` (10) and `=` (11), decoding ids back to the characters joined.
Deterministic; run it again to remake both files.
"""
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CHARS = "0123456789+="


def prompts(seed: int = 0) -> np.ndarray:
    """Every `a+b=` with digits a and b as token ids [100 4] i32, in a seeded order."""
    rows = np.array([[a, 10, b, 11] for a in range(10) for b in range(10)], np.int32)
    return rows[np.random.default_rng(seed).permutation(len(rows))]


def tokenizer():
    """The character-level tokenizer (tokenizers' WordLevel model, one token per character)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(CHARS)}, unk_token="="))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    tok.decoder = decoders.Fuse()
    return tok


if __name__ == "__main__":
    np.savez_compressed(HERE / "sums.npz", prompt=prompts())
    tokenizer().save(str(HERE / "sums-tokenizer.json"))
