"""Editor queries over one checked file, as plain data.

The language server (`lsp/`) answers every request through this package:
hover, definitions and references, rename, symbols, folding, completion,
signature help, inlay hints, semantic tokens and quick fixes. Everything
here speaks the front end's terms: code-point offsets and `Span`s, types as
text, kinds as short strings (`"function"`, `"field"`); `lsp/convert.py`
turns them into LSP positions and objects. No check is repeated: types,
definitions and uses all come from `CheckResult.facts`; this package only
finds the node under the cursor and reads those facts.

Build one `Index` per checked file (`index(analyze(text))`) and ask it any
number of queries. No query raises for any text or offset; an offset that
points at nothing gives an empty answer.

Modules: `index` (the `Index`), `results` (the answers' dataclasses),
`text` (the text-context scanner), `describe` (types and names as hover
text), and one module per feature: `hover`, `navigation`, `rename`,
`outline`, `completion`, `signature`, `inlay`, `tokens`, `fixes`. The
keyword tables they read are the language's schema, `sexpgpu_lang.language`.

Imports only `sexpgpu_lang`; never JAX, never lsprotocol.
"""
from __future__ import annotations

from .completion import completions
from .describe import show_type
from .fixes import quick_fixes
from .hover import hover
from .index import Index, index
from .inlay import inlay_hints
from .navigation import definition, highlights, references
from .outline import document_symbols, folding_ranges
from .rename import RENAMEABLE, prepare_rename, rename
from .results import (TOKEN_MODIFIERS, TOKEN_TYPES, Completion, Completions, Edit, Fix, Fold, HoverInfo, InlayHint,
                      Ref, RenameError, Signature, Symbol, Target, Token)
from .signature import signature_help
from .tokens import semantic_tokens

__all__ = [
    "Completion", "Completions", "Edit", "Fix", "Fold", "HoverInfo", "Index", "InlayHint", "RENAMEABLE", "Ref",
    "RenameError", "Signature", "Symbol", "TOKEN_MODIFIERS", "TOKEN_TYPES", "Target", "Token", "completions",
    "definition", "document_symbols", "folding_ranges", "highlights", "hover", "index", "inlay_hints",
    "prepare_rename", "quick_fixes", "references", "rename", "semantic_tokens", "show_type", "signature_help",
]
