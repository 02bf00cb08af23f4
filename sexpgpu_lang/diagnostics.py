"""Diagnostics as data: codes, severities, and the `Diagnostic` record.

Every check in the front end reports through `Diagnostic`; `sexpgpu lint`,
`sexpgpu run` and the language server only render these records. Each code
has a record (when it fires, an example that triggers it, the fix) in
`sexpgpu_lang/diagnostic_docs/`, from which `docs/errors.md` is generated;
`doc_anchor(code)` gives its anchor there. The families and the codes fixed
by the spec come from `docs/dev/design.md#generation` and docs/dev/design.md#diagnostics.

Imports nothing outside `sexpgpu_lang.source`; never JAX.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from .records import Record
from .source import Span


class Severity(enum.IntEnum):
    """LSP's DiagnosticSeverity numbering (LSP 3.17, `DiagnosticSeverity`)."""

    ERROR = 1
    WARNING = 2
    INFORMATION = 3
    HINT = 4

    @property
    def label(self) -> str:
        """`error`, `warning`, `information` or `hint`."""
        return self.name.lower()


#: Every code the front end emits, with a one-line title: the heading of its record in
#: `sexpgpu_lang/diagnostic_docs/` and of its section in `docs/errors.md` (a test keeps
#: every code with a record).
CODES: dict[str, str] = {
    "E-SYNTAX-001": "unclosed bracket",
    "E-SYNTAX-002": "unexpected closing bracket",
    "E-SYNTAX-003": "bad token",
    "E-SYNTAX-004": "mismatched bracket",
    "E-SYNTAX-005": "nesting too deep",
    "E-SYNTAX-006": "too many tokens",
    "E-NAME-001": "unbound name",
    "E-NAME-002": "duplicate definition",
    "E-NAME-003": "unknown keyword argument",
    "E-NAME-004": "unknown key",
    "E-FORM-001": "missing top-level form",
    "E-FORM-002": "malformed form",
    "E-FORM-003": "wrong number of arguments",
    "E-FORM-004": "unknown top-level form",
    "E-FORM-005": "missing keyword argument",
    "E-TYPE-001": "not a tensor",
    "E-TYPE-002": "wrong dtype",
    "E-TYPE-003": "not a compile-time constant",
    "E-TYPE-004": "not callable",
    "E-TYPE-005": "a division of integers that is not exact",
    "E-TYPE-006": "a division by a constant zero",
    "E-SHAPE-001": "shapes do not broadcast",
    "E-SHAPE-002": "matmul inner sizes differ",
    "E-SHAPE-003": "axis out of range",
    "E-SHAPE-004": "a size out of range, or a reshape that changes the size",
    "E-SHAPE-005": "shapes differ where they must agree",
    "E-GEN-001": "a generator phase returns something other than a plist of tensors",
    "E-GEN-002": "the state changes between trips",
    "E-GEN-003": "a generated name is a loader field",
    "E-GEN-004": "a metric inside a generator",
    "E-GEN-005": "`:trips` is not an integer from 1 to 1048576",
    "E-GEN-006": "`:until` does not return a bool scalar",
    "E-CONTRACT-001": "`prepare` reads a field nobody provides",
    "E-CONTRACT-002": "`objective` does not return a float scalar",
    "E-CONTRACT-005": "a pass that does not run the generator reads a generated name",
    "E-CONTRACT-010": "a counter outside `prepare`",
    "E-MODEL-001": "a model called but not reachable from `model`",
    "E-MODEL-002": "a model's parameters form a cycle",
    "E-MODEL-003": "a pretrained file that does not match `:params`",
    "E-MODEL-004": "a repeated block's carry changes type between layers",
    "E-MODEL-005": "a repeat that cannot be stacked",
    "E-MODEL-006": "a `:pretrained` name mapping that does not fit `:params`",
    "E-MODEL-007": "a `:copy` model that cannot copy its source",
    "E-MODEL-008": "a `:lora` setting that does not fit the model: no such target, a rank past the matrix",
    "E-OPT-001": "an unknown learning-rate schedule",
    "E-OPT-002": "an optimizer or schedule setting out of range",
    "E-OPT-003": "a weight-decay mask that is not `:matrices`, `:all` or parameter keys",
    "E-SAMPLE-001": "a `:samples` name nothing provides",
    "E-SAMPLE-002": "a `:samples` `:text` tensor that is not token ids",
    "E-SAMPLE-003": "a `:samples` setting that does not fit its tensor",
    "E-REWARD-001": "a `:reward` Python file that cannot be read",
    "E-REWARD-002": "a `:reward` function the Python file does not define",
    "E-REWARD-003": "a `:reward` function whose parameters do not take the call",
    "E-REWARD-004": "a `:reward` setting that does not fit the batch",
    "W-STACK-001": "a generator reads a per-microbatch context key: the run stays unstacked",
    "W-RAND-001": "an unsalted draw inside a generator",
    "W-RAND-002": "an unsalted draw in `prepare` or `objective`",
    "W-RAND-003": "a salt that is the same at every trip of `:step`",
    "W-GEN-001": "an `f32` state entry under `:precision :bf16`",
    "W-GEN-002": "`:until` ends on a per-row stop, but `:step` writes past a row's stop",
    "W-SHAPE-001": "an index or label provably outside the axis it indexes",
    "W-SHAPE-002": "a read or write whose start provably leaves its axis",
    "E-RAND-001": "a sampling setting out of range (`:temperature`, `:top-k`, `:top-p`)",
    "E-CONFIG-001": "a checkpoint's `config.json` that cannot be read",
    "E-CONFIG-002": "a `config.json` setting the standard library does not compute",
    "E-CONFIG-003": "a `checkpoint-config` key that the config has not",
    "E-CONFIG-004": "a stated value that differs from the checkpoint's `config.json`",
    "W-CONFIG-001": "a setting whose value the checker cannot compare with the checkpoint's `config.json`",
    "W-CONFIG-002": "positions past the checkpoint's `max_position_embeddings`",
    "W-MODEL-001": "a `:pretrained` file has tensors `:params` does not name",
    "W-MODEL-002": "a trainable parameter that gets no gradient from the loss",
    "W-OPT-001": "a warmup longer than the run",
    "W-LOADER-001": "a tokenizer with more ids than the loader's `:vocab`",
    "W-SAMPLE-001": "a `:samples` `:tokenizer` whose vocabulary is not the training loader's",
    "W-LOADER-002": "a token file whose size or ids make its `:dtype` implausible",
    "W-LOADER-003": "a prompt padded on the right reaches `prefill-prompts`, which decodes after its last column",
    "E-LOADER-001": "a loader's file that is not there, not a regular file, or not readable as its source reads it",
}


def quote_controls(text: str) -> str:
    """`text` with each character a terminal or an editor would not show as itself (a control
    character such as NUL, a format character such as a bidirectional override, a line or
    paragraph separator, a space other than ` `) written as `U+0000`; a newline stays.

    Every message, help and related message goes through it (`Diagnostic`, `Related`), so
    source text quoted into a message never carries such a character: Emacs refuses a whole
    LSP notification holding a NUL, and a terminal obeys control characters."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else f"U+{ord(c):04X}" for c in text)


QUOTE_LIMIT = 120
"""The most characters of one value quoted in a message (between backticks or double quotes); a
longer one keeps its first and last characters around an ellipsis (`clip`)."""
MESSAGE_LIMIT = 4_000
"""The most characters of a message, help or related message: past it the middle is cut to an
ellipsis (a type of 40,000 entries, a list of names), so an editor never shows a megabyte."""

_DOUBLE_QUOTED = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')   # (unrolled: no regex state a character)


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` when it has at most `limit` characters, else its first and last characters around `…`
    (`limit` characters in all): how a message quotes a value of any length."""
    if len(text) <= limit:
        return text
    tail = limit // 4
    return text[:limit - tail - 1] + "…" + text[len(text) - tail:]


def shown_value(value, keyword: bool = False) -> str:
    """How a message shows a constant `value` as the file wrote it: a string between double quotes
    (its quotes and backslashes escaped, `clip`ped), a keyword's name as `:name` (`keyword`), a bool
    as `true`/`false`, None as `nothing`, a number or shape as Python writes it. So `:dropout "0.1"`
    reads `got "0.1"`, not `got 0.1`, which looks like the number it is not."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if keyword:
            return ":" + clip(value)
        return '"' + clip(value.replace("\\", "\\\\").replace('"', '\\"')) + '"'
    return clip(str(value))


def bounded(text: str) -> str:
    """`text` with each quoted value (between backticks or double quotes) of more than QUOTE_LIMIT
    characters clipped, then the whole cut to MESSAGE_LIMIT characters (`clip`). Every message, help
    and related message goes through it (`Diagnostic`, `Related`), after `quote_controls`."""
    if len(text) <= QUOTE_LIMIT:
        return text

    def quoted(m) -> str:
        return m.group(0) if len(m.group(0)) <= QUOTE_LIMIT + 2 else '"' + clip(m.group(0)[1:-1]) + '"'

    # Between backticks: the odd parts of a split on them (so a closing backtick never opens a quote).
    parts = text.split("`")
    text = "`".join(clip(part) if i % 2 else _DOUBLE_QUOTED.sub(quoted, part) for i, part in enumerate(parts))
    return clip(text, MESSAGE_LIMIT)


def doc_anchor(code: str) -> str:
    """The anchor of `code`'s entry in docs/errors.md, e.g. `e-gen-002`."""
    return code.lower()


@dataclass(frozen=True, slots=True, repr=False)
class Related(Record):
    """A second place that explains a diagnostic (LSP `DiagnosticRelatedInformation`)."""

    span: Span
    message: str

    def __post_init__(self):
        object.__setattr__(self, "message", bounded(quote_controls(self.message)))


@dataclass(frozen=True, slots=True, repr=False)
class Diagnostic(Record):
    """One problem in a run file.

    `span` is the smallest range that shows the problem; `related` are other
    places (for E-GEN-002, where `:init` made the key); `help` says how to
    fix it. `code` is a key of `CODES`.
    """

    code: str
    severity: Severity
    message: str
    span: Span
    related: tuple[Related, ...] = ()
    help: str | None = None
    data: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        # The one place source text quoted into a message is made safe to show (`quote_controls`).
        # ... and cut to a bounded length (`bounded`): a value of any size is quoted clipped.
        object.__setattr__(self, "message", bounded(quote_controls(self.message)))
        if self.help is not None:
            object.__setattr__(self, "help", bounded(quote_controls(self.help)))

    @property
    def is_error(self) -> bool:
        """True for severity error."""
        return self.severity == Severity.ERROR


def error(code: str, span: Span, message: str, *, related=(), help=None, data=None) -> Diagnostic:
    """An error diagnostic; `code` must be in `CODES`."""
    assert code in CODES, code
    return Diagnostic(code, Severity.ERROR, message, span, tuple(related), help, data or {})


def warning(code: str, span: Span, message: str, *, related=(), help=None, data=None) -> Diagnostic:
    """A warning diagnostic; `code` must be in `CODES`."""
    assert code in CODES, code
    return Diagnostic(code, Severity.WARNING, message, span, tuple(related), help, data or {})


def information(code: str, span: Span, message: str, *, related=(), help=None, data=None) -> Diagnostic:
    """An information diagnostic (something often meant, said once); `code` must be in `CODES`."""
    assert code in CODES, code
    return Diagnostic(code, Severity.INFORMATION, message, span, tuple(related), help, data or {})


def hint(code: str, span: Span, message: str, *, related=(), help=None, data=None) -> Diagnostic:
    """A hint diagnostic (a possible improvement, shown faintly); `code` must be in `CODES`."""
    assert code in CODES, code
    return Diagnostic(code, Severity.HINT, message, span, tuple(related), help, data or {})
