"""Names, types and the phase checks: syntax tree to typed IR and diagnostics.

`check(parse_result)` walks the top-level forms (docs/dev/design.md#forms-and-the-context) in the
order the runtime runs them: loader fields, `:init`, `:step` (whose result
must equal the state `:init` made: the check across trips,
docs/dev/design.md#generation), `:finish`, `prepare`, `objective`, then each pass. It
never raises for a user's mistake: every problem becomes a `Diagnostic`,
and an expression already reported gets `ERROR` as its type so nothing that
depends on it is reported again. Besides the IR, it records what an editor
needs as plain data (`Facts`): the type of every expression by range, every
definition and every use.

The modules, each a set of functions over one `context.CheckContext`:
`toplevel` (the forms' order and the result), `forms` (`def`, `loader`,
`run`, `curriculum`), `models` (`defmodel`, `model`), `generate` (every
E-GEN code), `phases` (`prepare`, `objective`, passes), `contracts` (every
E-CONTRACT code), `infer` (expressions, special forms, calls), `keywords`
(keyword arguments and compile-time values), `program` (the `ir.Program`),
`identity` (the hashes), `incremental` (the cache), `scope` (scopes,
frames, the standard library), `facts` (the editor data model). The
language's schema (forms, keywords, context keys, sources, optimizers) is
`sexpgpu_lang.language`, re-exported here under its old names.

Imports nothing outside `sexpgpu_lang`; never JAX.
"""
from __future__ import annotations

from .. import ir
from ..cancel import CancelToken
from ..diagnostics import Diagnostic
from ..language import OPTIMIZERS, RUN_KEYS, SOURCES, SPECIAL_FORMS, TOP_FORMS
from ..source import SourceText
from ..syntax import ParseResult, parse
from ..types import Type
from .context import CheckContext
from .facts import CheckResult, Definition, Facts
from .identity import identity, place_hash
from .incremental import CheckCache
from .infer import infer
from .scope import CTX_KEYS, BatchType, Binding, CtxType, stdlib_docs
from .toplevel import check_file

__all__ = ["check", "check_expression", "CheckCache", "CheckResult", "Definition", "Facts", "identity", "place_hash",
           "stdlib_docs", "BatchType", "CtxType", "CTX_KEYS", "OPTIMIZERS", "RUN_KEYS", "SOURCES", "SPECIAL_FORMS",
           "TOP_FORMS"]


def check(parsed: ParseResult, read_files: bool | str = False, cache: CheckCache | None = None,
          build_ir: bool = True, cancel: CancelToken | None = None) -> CheckResult:
    """Check a parsed file: diagnostics, editor facts, and the IR when there is no error. Never raises for user input.

    Opens no file unless `read_files` (then each `:pretrained` file's header, for E-MODEL-003;
    with `"local"`, as the language server checks, only the checkpoints that are on this machine).
    `cache`, kept from the check of an earlier version of the same file, makes the check
    incremental (the result is the same); `build_ir=False` leaves `program` None. Raises
    `cancel.Cancelled` (between two top-level forms) once `cancel` is cancelled: the language server
    abandons the check of a version a newer one superseded."""
    return check_file(CheckContext(parsed, read_files, cache, cancel), build_ir)


def check_expression(text: str, names: dict[str, Type]) -> tuple[ir.Expr | None, list[Diagnostic]]:
    """Check one expression with `names` bound to the given types (tests, hover experiments).

    Returns the IR (None when the text holds no expression) and the diagnostics.
    """
    parsed = parse(SourceText(text))
    ctx = CheckContext(parsed)
    scope = ctx.globals.child()
    for n, t in names.items():
        scope.names[n] = Binding(t)
    if not parsed.forms:
        return None, list(parsed.diagnostics)
    e = infer(ctx, parsed.forms[0], scope)
    return e, ctx.diags
