"""How `text-tokens` turns text into ids, and when there are too few of them: shared by the
runtime (sexpgpu_runtime/data/tokenize.py, token_loaders.py) and `lint --read-files`
(check/loader_sources.py), so that both count the same tokens and say the same words.

Encoding rule: each text encoded without the tokenizer's special tokens
(`add_special_tokens=False`), the `:separator` id (if given) after each one.
Imports `tokenizers` only where a tokenizer is handed in; never JAX.
"""
from __future__ import annotations

#: The most bytes of text `lint --read-files` tokenizes to count a `text-tokens` source's tokens
#: (a larger corpus holds more than one window of any `:seq` that fits a model).
SHORT_TEXT_LIMIT = 1 << 20


def encoded(tok, texts: list[str], sep: int | None):
    """The ids of each of `texts` by the encoding rule, a list per text (`tok` a tokenizers.Tokenizer)."""
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        yield enc.ids + ([sep] if sep is not None else [])


def window_count(tokens: int, span: int, stride: int) -> int:
    """How many windows of `span` ids, one every `stride` ids, `tokens` ids hold (a token source's records)."""
    return (tokens - span) // stride + 1 if tokens >= span else 0


def fewer_than_a_batch(records: int, batch: int, unit: str) -> tuple[str, str] | None:
    """(the reason, the fix) when a loader's `records` (`unit`: "window" for a token source, else
    "record") are fewer than one `:batch`: an epoch shorter than a batch would repeat records within
    every batch, which `run` refuses (sexpgpu_runtime/data/loaders.py) and `lint --read-files`
    with it; else None."""
    if records >= batch:
        return None
    return (f"has {records} {unit}{'s' if records != 1 else ''}, fewer than one batch of {batch}",
            f"give it at least {batch} {unit}s, or lower `:batch`" + (" or `:seq`" if unit == "window" else ""))


def fewer_than_a_window(tokens: int, span: int) -> tuple[str, str] | None:
    """(the reason, the fix) when `tokens` ids give no window of `span` (`:seq`, or `:seq + 1` with a
    target field), else None."""
    if tokens >= span:
        return None
    return f"holds {tokens} tokens, fewer than one window of {span}", "give it more text, or lower `:seq`"
