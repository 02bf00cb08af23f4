"""How the `sexpgpu` commands read and show their options: `Command` and `Group`, the typer classes of
every command.

Values converted without pydantic: typer converts every parameter's value through a pydantic
`TypeAdapter`, and importing pydantic (and its plugin loader, which imports importlib.metadata)
and building the adapters costs more than the rest of `sexpgpu lint` (benchmarks/cli_startup.py
measures both: 50-70 ms of CPU, against lint's 26-30 beyond `import typer`).
`fast_process_value` converts, in click's public `Parameter.process_value`, the values typer
would convert the same way, and leaves any other to typer. Help that reads like a usual command
line (`_PlainHelp`).

Imports typer only (the commands' own modules import what they need).
"""
from enum import Enum
from pathlib import Path

import typer
import typer.core


def fast_process_value(param, ctx, value, base):
    """A command-line parameter's value converted here, without pydantic, or by `base` (its typer class).

    typer converts every parameter's value through a pydantic `TypeAdapter`, and importing
    pydantic (and its plugin loader, which imports importlib.metadata) and building the adapters
    costs more than the rest of `sexpgpu lint`. This converts, in click's public
    `Parameter.process_value`, the values of the simple parameters the commands here declare (a
    path, a list of paths, an enum choice, a plain `str` or `bool`, or no value) as typer does
    for them; any other parameter, any declaration with a path check or a parser, and any value
    this does not accept (an unknown choice, an unreadable file), goes to typer's own conversion,
    which then reports the error exactly as typer does. `declared` is the command function's
    parameter (its annotation and its `typer.Option`/`typer.Argument`; `--help`: a bool flag), set by
    `Command.get_params`.
    """
    if param.declared is not None:
        try:
            out = _convert(value, *param.declared, param.multiple or param.nargs == -1)
        except _Unsure:
            pass
        else:
            if not (param.required and param.value_is_missing(out)):   # (typer says what is missing)
                return out if param.callback is None else param.callback(ctx, param, out)
    return base.process_value(param, ctx, value)


class _Unsure(Exception):
    """`fast_process_value` leaves this value to typer."""


def _convert(value, annotation, info, multi: bool):
    """`value` converted as typer converts it for `annotation` declared with `info` (a
    typer.models.ParameterInfo); _Unsure where this does not know that it would be the same."""
    if value is None:
        return () if multi else None
    if getattr(info, "parser", None) is not None:
        raise _Unsure
    if multi:
        item = _list_item(annotation)
        if item is None or not isinstance(value, (list, tuple)):
            raise _Unsure
        return [_convert_one(v, item, info) for v in value]
    if isinstance(value, (list, tuple)):
        raise _Unsure
    return _convert_one(value, annotation, info)


def _convert_one(value, annotation, info):
    if isinstance(annotation, type) and issubclass(annotation, Enum) and isinstance(value, (str, annotation)):
        if isinstance(value, annotation):   # (the default)
            return value
        if getattr(info, "case_sensitive", True) is True:
            for member in annotation:
                if member.value == value:
                    return member
        raise _Unsure   # typer words the error
    if annotation is bool and isinstance(value, bool):
        return value
    if annotation is str and isinstance(value, str):
        return value
    if annotation is Path and isinstance(value, str) and value and _plain_path(info):
        import os
        if os.path.exists(value) and not os.access(value, os.R_OK):
            raise _Unsure   # typer's "is not readable"
        return Path(value)
    raise _Unsure


def _plain_path(info) -> bool:
    """Whether a path parameter declares none of the checks typer would make on it beyond readability."""
    want = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False, "readable": True,
            "resolve_path": False, "allow_dash": False, "path_type": None}
    return all(getattr(info, k, v) == v for k, v in want.items())


def _list_item(annotation):
    """The item type of `list[X]` / `List[X]`, else None."""
    from typing import get_args, get_origin
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return args[0] if len(args) == 1 else None
    return None


def _convert_without_pydantic(command, params) -> None:
    """Give each of `command`'s typer parameters `fast_process_value`'s conversion, with its declaration
    (the class of a typer parameter becomes its subclass here: only click's public API is used)."""
    import inspect
    declared = inspect.signature(command.callback).parameters if command.callback is not None else {}
    for p in params:
        fast = _FAST.get(type(p))
        if fast is not None and p.name in declared:
            p.__class__ = fast
            p.declared = (declared[p.name].annotation, declared[p.name].default)
        elif fast is not None and getattr(p, "is_flag", False) and p.name == "help":   # typer's own `--help`
            p.__class__ = fast
            p.declared = (bool, None)


class _FastArgument(typer.core.TyperArgument):
    """A typer argument whose value `fast_process_value` converts (click's `Parameter.process_value`)."""

    declared = None

    def process_value(self, ctx, value):
        return fast_process_value(self, ctx, value, typer.core.TyperArgument)


class _FastOption(typer.core.TyperOption):
    """A typer option whose value `fast_process_value` converts (click's `Parameter.process_value`)."""

    declared = None

    def process_value(self, ctx, value):
        return fast_process_value(self, ctx, value, typer.core.TyperOption)


_FAST = {typer.core.TyperArgument: _FastArgument, typer.core.TyperOption: _FastOption}


class _PlainHelp:
    """Help that reads like a usual command line. Typer writes a required argument as `{files}...` in
    the usage line and gives every flag a `<bool>` type, as if it took a value; here an argument is its
    metavar (`FILE...`, `[FILE]` when optional) and a flag (`--resume`, `--help`) shows no type."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        args = [p for p in self.get_params(ctx) if isinstance(p, typer.core.TyperArgument)]
        for p in args:
            typer_piece = p.get_usage_pieces(ctx)
            name = (p.metavar or p.name.upper()) + ("..." if p.nargs != 1 else "")
            plain = name if p.required else f"[{name}]"
            pieces = [plain if piece in typer_piece else piece for piece in pieces]
        return pieces

    def get_params(self, ctx):
        params = super().get_params(ctx)
        _convert_without_pydantic(self, params)   # `--help` is made here, after __init__
        for p in params:
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""   # a flag takes no value: no type column
        return params


class Command(_PlainHelp, typer.core.TyperCommand):
    """Every `sexpgpu` command."""


class Group(_PlainHelp, typer.core.TyperGroup):
    """`sexpgpu` itself."""
