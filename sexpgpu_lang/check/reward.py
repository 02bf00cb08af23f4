"""`defgenerate`'s `:reward`: a Python function of the decoded rows (docs/language.md "Rewards in Python").

`(defgenerate ... :reward (:python "reward.py" :function "score" :text :answer :prompt 4 :fields [:target]
:name :reward))` names a function that `sexpgpu run` calls on the host after `generate.finish`, once per
microbatch; its `[B] f32` result joins the batch as `:name`. Every E-REWARD code is decided here:

- E-REWARD-001: the Python file cannot be read or parsed (missing, not a regular file, too large, not
  UTF-8, a syntax error);
- E-REWARD-002: the file defines no top-level `:function` (a `def`, an assignment or an import of it);
- E-REWARD-003: a `def` whose parameters cannot take the call `f(prompts=..., completions=..., **fields)`
  (a required parameter it is not given, a keyword it has no parameter for and no `**kwargs`);
- E-REWARD-004: a setting that does not fit the batch (`:text` not an integer `[B T]` tensor of it, a
  `:prompt` leaving no completion, a field that is not a `[B ...]` tensor of it, a `:name` the batch has).

The file is read (bounded, `bounded_read.PYTHON_SOURCE_LIMIT`) and parsed with `ast` only where the
check reads files (`sexpgpu run`, `lint --read-files`, the language server on this machine); it is
never imported or executed here: `lint`, `explain` and the editor run no user code (docs/dev/design.md
§10). Imports nothing outside `sexpgpu_lang` and the standard library; never JAX.
"""
from __future__ import annotations

import ast
import os

from .. import ir
from ..files.bounded_read import PYTHON_SOURCE_LIMIT, read_bounded
from ..kept import MISSING, Space
from ..language import PLIST_KEYWORDS
from ..syntax import Kw, ListNode, Node, VecNode
from ..types import ERROR, ErrorType, PlistType, TensorType, Type, is_int
from .context import CheckContext, near_miss
from .keywords import const_int, const_value, keyword_args
from .samples import decoding, text_masks

#: The keywords every call passes (beside one per `:fields` name).
CALL_KEYWORDS = ("prompts", "completions")
#: The batch name the rewards join as without `:name`.
DEFAULT_NAME = "reward"

#: (path, mtime_ns, size) -> the file's top-level definitions (or the reason it cannot be read): the
#: language server checks on every edit, and a file is parsed again only when it changes. At most 64
#: files and 32 MiB (estimated: `ast`'s nodes take some 45 bytes a byte of source) in all.
PARSED = Space("reward files", 64, 32 << 20)
AST_BYTES_PER_BYTE = 48


def keyword_name(name: str) -> str:
    """The Python keyword a batch name is passed as: `-` becomes `_` (`:row-reward` is `row_reward`)."""
    return name.replace("-", "_")


def check_reward(ctx: CheckContext, node: Node, train: ir.LoaderIR,
                 out: PlistType) -> tuple[ir.RewardIR | None, str | None, Type]:
    """Check `:reward`'s plist against the batch (`train`'s fields and `out`, what `:finish` makes) and,
    where the check reads files, against the Python file. Returns the `ir.RewardIR` (None after an
    error), the rewards' batch name (None where it cannot be told) and its type (`[B] f32`, or the
    error type that silences what reads it when `:text` gives no `B`)."""
    if not isinstance(node, ListNode) or (node.items and not isinstance(node.items[0], Kw)):
        ctx.err("E-FORM-002", node.span, "`:reward` takes a plist like `(:python \"reward.py\" :function \"score\" "
                ":text :answer)`")
        return None, DEFAULT_NAME, ERROR
    kws = keyword_args(ctx, node, 0, tuple(PLIST_KEYWORDS["reward"]), ":reward")
    ok = True
    missing = [f"`:{k}`" for k in ("python", "function", "text") if k not in kws]
    if missing:   # one diagnostic (they would share the range)
        said = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        ctx.err("E-FORM-005", node.span, f"`:reward` needs {said}",
                help="e.g. `(:python \"reward.py\" :function \"score\" :text :answer :prompt 4)`")
        ok = False
    strings = {}
    for key in ("python", "function", "tokenizer"):
        if key in kws:
            v = const_value(ctx, kws[key][1])
            if v is not None and not isinstance(v, str):
                ctx.err("E-TYPE-003", kws[key][1].span, f"`:{key}` of `:reward` must be a string")
                v = None
            ok = ok and v is not None
            strings[key] = v
    if strings.get("function") is not None and not strings["function"].isidentifier():
        ctx.err("E-REWARD-002", kws["function"][1].span, f"`{strings['function']}` is not a Python name",
                help="name the function as the file's `def` does, e.g. `\"score\"`")
        ok = False
    prompt = const_int(ctx, kws["prompt"][1], "`:prompt` of `:reward`", 0) if "prompt" in kws else 0
    ok = ok and prompt is not None
    known = dict(train.batch_type().entries)
    known.update(dict(out.entries))
    rows, text = _text(ctx, kws, known, prompt)
    ok = ok and text is not None
    fields = _fields(ctx, kws, known, rows) if "fields" in kws else ()
    ok = ok and fields is not None
    name = _name(ctx, kws, known)
    ok = ok and name is not None and not name_clash(ctx, node, name, out)
    base = os.path.dirname(os.path.abspath(ctx.src.path)) if ctx.src.path else os.getcwd()
    path = os.path.normpath(os.path.join(base, os.path.expanduser(strings["python"]))) \
        if strings.get("python") is not None else None
    if ok and ctx.read_files:
        ok = _check_file(ctx, kws, path, strings["function"], [k for _, k in fields or ()])
    t = TensorType((rows,), "f32") if rows is not None else ERROR
    if not ok or rows is None:
        return None, name, t
    line, col = ctx.src.line_col(node.span.start)
    masks = text_masks([(text, known[text].shape, known[text].dtype)], known)
    return ir.RewardIR(path, strings["function"], name, rows, text, prompt,
                       decoding(train, strings.get("tokenizer"), ctx.src.path), tuple(fields),
                       f"{ctx.src.path}:{line + 1}:{col + 1}", masks[0][1] if masks else None), name, t


def _text(ctx: CheckContext, kws: dict, known: dict, prompt: int | None) -> tuple[int | None, str | None]:
    """`:text`: (rows, name) of an integer `[B T]` tensor of the batch, or (None, None) after an error."""
    if "text" not in kws:
        return None, None
    node = kws["text"][1]
    if not isinstance(node, Kw):
        ctx.err("E-FORM-002", node.span, "`:text` of `:reward` takes a batch name like `:answer`")
        return None, None
    t = known.get(node.name)
    if t is None:
        hint = near_miss(node.name, known)
        ctx.err("E-REWARD-004", node.span, f"the batch has no `:{node.name}` to decode: neither the training "
                "loader nor the generator's `:finish` makes it" + (f"; did you mean `:{hint}`?" if hint else ""),
                help="name a token tensor of the batch: " + ", ".join(f"`:{n}`" for n in known),
                data={"replace": f":{hint}"} if hint else None)
        return None, None
    ctx.note_type(node, t)
    if isinstance(t, ErrorType):
        return None, None
    if not (isinstance(t, TensorType) and is_int(t.dtype) and len(t.shape) == 2):
        ctx.err("E-REWARD-004", node.span, f"`:{node.name}` is {t.show()}, not token ids `[B T]`: `:text` is "
                "decoded row by row to the prompts and completions",
                help="name the integer `[B T]` tensor of the rows the generator wrote")
        return None, None
    if prompt is not None and prompt >= t.shape[1]:
        ctx.err("E-REWARD-004", kws["prompt"][1].span, f"`:prompt {prompt}` leaves no completion in "
                f"`:{node.name}`, whose rows have {t.shape[1]} tokens",
                help=f"give the prompt's length, less than {t.shape[1]}")
        return None, None
    return t.shape[0], node.name


def _fields(ctx: CheckContext, kws: dict, known: dict, rows: int | None):
    """`:fields [:a :b]`: ((batch name, Python keyword), ...) of `[B ...]` tensors, or None after an error."""
    node = kws["fields"][1]
    if not (isinstance(node, VecNode) and all(isinstance(i, Kw) for i in node.items)):
        ctx.err("E-FORM-002", node.span, "`:fields` of `:reward` takes a vector of batch names like `[:target]`")
        return None
    out, ok = [], True
    for kw in node.items:
        t = known.get(kw.name)
        if t is None:
            hint = near_miss(kw.name, known)
            ctx.err("E-REWARD-004", kw.span, f"the batch has no `:{kw.name}` to pass to the reward function"
                    + (f"; did you mean `:{hint}`?" if hint else ""),
                    help="name a loader field or a name the generator's `:finish` returns: "
                         + ", ".join(f"`:{n}`" for n in known),
                    data={"replace": f":{hint}"} if hint else None)
            ok = False
            continue
        ctx.note_type(kw, t)
        if isinstance(t, ErrorType):
            ok = False
            continue
        if not isinstance(t, TensorType) or not t.shape or (rows is not None and t.shape[0] != rows):
            ctx.err("E-REWARD-004", kw.span, f"`:{kw.name}` is {t.show()}, not one entry per row of the "
                    f"{rows} decoded rows: the function receives `[B ...]` arrays"
                    if rows is not None else f"`:{kw.name}` is {t.show()}, not a `[B ...]` tensor",
                    help="pass the tensors with a row per decoded row (repeat a prompt's fields in `:finish`)")
            ok = False
            continue
        key = keyword_name(kw.name)
        if key in CALL_KEYWORDS or not key.isidentifier() or key in [k for _, k in out]:
            ctx.err("E-REWARD-004", kw.span, f"`:{kw.name}` would be passed as `{key}`, "
                    + ("which the call passes already" if key in CALL_KEYWORDS or key in [k for _, k in out]
                       else "not a Python name"), help="rename it in `:finish`")
            ok = False
            continue
        out.append((kw.name, key))
    return tuple(out) if ok else None


def _name(ctx: CheckContext, kws: dict, known: dict) -> str | None:
    """`:name`: the batch name of the rewards (`:reward` without it); a name the batch has is E-REWARD-004
    when `:finish` makes it (a loader field's is E-GEN-003, in check/generate.py)."""
    if "name" not in kws:
        return DEFAULT_NAME
    node = kws["name"][1]
    if not isinstance(node, Kw):
        ctx.err("E-FORM-002", node.span, "`:name` of `:reward` takes a keyword like `:reward`")
        return None
    return node.name


def name_clash(ctx: CheckContext, kws_node: Node, name: str, out: PlistType) -> bool:
    """E-REWARD-004 when `:finish` already makes `name`; True when it does."""
    if name not in out.keys:
        return False
    span = kws_node.span
    if isinstance(kws_node, ListNode):
        for i, it in enumerate(kws_node.items[:-1]):
            if isinstance(it, Kw) and it.name == "name":
                span = kws_node.items[i + 1].span
    ctx.err("E-REWARD-004", span, f"the generator's `:finish` makes `:{name}` already, which the rewards would "
            "replace", help=f"give the rewards another name, e.g. `:name :{name}-python`")
    return True


def top_definitions(path: str) -> tuple[dict[str, ast.AST | None] | None, str | None]:
    """The top-level names a Python file defines, each to its `ast.FunctionDef` (None for a name bound
    otherwise: an assignment, an import, a class), or (None, why it cannot be read). Reads at most
    `PYTHON_SOURCE_LIMIT` bytes and parses with `ast`: the file is never imported or executed."""
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    got = PARSED.lookup(key) if key is not None else MISSING
    if got is MISSING:
        got = _parse(path)
        if key is not None:
            PARSED.keep(key, got, 1024 + key[2] * AST_BYTES_PER_BYTE)
    return got


def _parse(path: str):
    try:
        raw = read_bounded(path, PYTHON_SOURCE_LIMIT, "a reward's Python file")
    except FileNotFoundError:
        return None, "no such file"
    except OSError as e:
        return None, str(e) if not getattr(e, "strerror", None) else e.strerror.lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"it is not UTF-8 (byte {e.start})"
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return None, f"it is not valid Python: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError) as e:
        return None, f"it is not valid Python: {type(e).__name__}"
    names: dict[str, ast.AST | None] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            names[stmt.name] = None
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = None
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                names[(a.asname or a.name).split(".")[0]] = None
    return names, None


def _check_file(ctx: CheckContext, kws: dict, path: str, function: str, fields: list[str]) -> bool:
    """E-REWARD-001 to 003 against the file at `path`; True when nothing was reported."""
    names, why = top_definitions(path)
    if names is None:
        written = const_value(ctx, kws["python"][1])
        ctx.err("E-REWARD-001", kws["python"][1].span, f"cannot read the reward's Python file `{written}`: {why}",
                help="give the path of a Python file, relative to the run file")
        return False
    if function not in names:
        hint = near_miss(function, [n for n in names if not n.startswith("_")])
        ctx.err("E-REWARD-002", kws["function"][1].span, f"{os.path.basename(path)} defines no top-level "
                f"`{function}`" + (f"; did you mean `{hint}`?" if hint else ""),
                help=f"write `def {function}(prompts, completions, **fields):` in {os.path.basename(path)}, "
                     "returning one float per row", data={"replace": f'"{hint}"'} if hint else None)
        return False
    fn = names[function]
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        why = _signature_problem(fn, (*CALL_KEYWORDS, *fields))
        if why is not None:
            ctx.err("E-REWARD-003", kws["function"][1].span,
                    f"`{function}` ({os.path.basename(path)}:{fn.lineno}) cannot take the call "
                    f"`{function}({', '.join(f'{k}=...' for k in (*CALL_KEYWORDS, *fields))})`: {why}",
                    help="give it the parameters `prompts, completions"
                         + "".join(f", {k}" for k in fields) + "`, or `**kwargs` for those it does not read")
            return False
        if isinstance(fn, ast.AsyncFunctionDef):
            ctx.err("E-REWARD-003", kws["function"][1].span, f"`{function}` ({os.path.basename(path)}:{fn.lineno}) "
                    "is `async def`: the rewards are needed before the training graph runs",
                    help="make it a plain `def`")
            return False
    return True


def _signature_problem(fn: ast.FunctionDef | ast.AsyncFunctionDef, given: tuple[str, ...]) -> str | None:
    """Why a `def` cannot be called with exactly the keyword arguments `given`, or None."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = len(a.defaults)
    required_pos = positional[:len(positional) - defaults] if defaults else positional
    names = {p.arg for p in a.args + a.kwonlyargs}
    for p in a.posonlyargs[:len(required_pos)]:
        return f"its parameter `{p.arg}` is positional-only, and every argument is passed by keyword"
    missing = [p.arg for p in required_pos if p.arg not in given]
    missing += [p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is None and p.arg not in given]
    if missing:
        return f"it needs `{missing[0]}`, which the call does not pass"
    extra = [k for k in given if k not in names]
    if extra and a.kwarg is None:
        return f"it has no parameter `{extra[0]}` and no `**kwargs`"
    return None
