"""A prompt source's text and chat rows to token ids: the one encoding `sexpgpu run` and `lint --read-files` share.

A text row is encoded with the tokenizer, without its special tokens (a
prompt set's text is a piece of a sequence). A chat row (a list of
`{role, content}` messages) is rendered through the tokenizer's chat
template with the generation prompt added (chat_template.py), then encoded
the same way, without special tokens: the template writes the ones it wants
(`bos_token`), as transformers' `apply_chat_template` does. prompt_rows.PromptRows
calls `ids` for each row, so that the run and lint refuse the same rows.
"""
from __future__ import annotations

from .chat_template import ChatTemplate


class PromptEncoder:
    """`ids(value, kind)` of one row with `tokenizer` (a `tokenizers.Tokenizer`) loaded from
    `tokenizer_path`, whose directory holds the chat template (read at the first chat row).
    `kept`, when given, is called with each row's field name and ids (the runtime keeps them for
    the table)."""

    def __init__(self, tokenizer, tokenizer_path: str, kept=None):
        self.tokenizer, self.path, self.kept = tokenizer, tokenizer_path, kept
        self._template: ChatTemplate | None = None

    def template(self) -> ChatTemplate:
        """The chat template beside the tokenizer (chat_template.NoChatTemplate when there is none)."""
        if self._template is None:
            self._template = ChatTemplate.beside(self.path)
            self._template.compiled()
        return self._template

    def text(self, value, kind: str) -> str:
        """The text a row's `value` is tokenized from: itself ("text"), or its messages rendered ("chat":
        chat_template.RenderError, NoChatTemplate)."""
        return self.template().render(value) if kind == "chat" else value

    def ids(self, value, kind: str, field: str = "") -> list[int]:
        """The token ids of a row's `value` (`kind` "text" or "chat") of `field`, without the tokenizer's
        special tokens."""
        ids = self.tokenizer.encode(self.text(value, kind), add_special_tokens=False).ids
        if self.kept is not None:
            self.kept(field, ids)
        return ids
