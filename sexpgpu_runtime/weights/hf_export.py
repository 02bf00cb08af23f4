"""What an export in the Hugging Face layout writes beside the weights: `config.json`, and the run's tokenizer.

`config_of` gives the `config.json` transformers' `AutoConfig` and
`AutoModelForCausalLM.from_pretrained` read (sexpgpu_lang/files/hf_config.py
`export_config`): the root model's own checkpoint's config, where it was
loaded from one, with the model's sizes; else one made from the sizes of
its parameters and the settings its standard-library calls state. A
mapping of the file's own (`--export-names MODEL`) gets the config of
that model's checkpoint, copied, where there is one, and none otherwise.
`tokenizer_files` copies the `tokenizer.json` the run's loaders read, with
a `tokenizer_config.json` naming transformers' fast tokenizer, so
`AutoTokenizer` loads the directory too. `export_extras` gives them as
(name, writer) pairs, which the export writes with its weights as one
export (export_files.py: a manifest, each file under a temporary name
renamed into place); `write_config` and `write_tokenizer` write them
alone. Errors are RunErrors.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from sexpgpu_lang import ir
from sexpgpu_lang.files.hf_config import ARCHITECTURES, CONFIG, ConfigError, config_path, export_config, read

from ..data.files import resolve_path
from ..errors import LoaderError, RunError
from ..paths import publish

#: SexpGPU dtypes as transformers' `torch_dtype` names.
_TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64"}


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        publish(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RunError(f"cannot write {path}: {e.strerror or e}")


def source_config(program: ir.Program, model: str | None = None) -> dict | None:
    """The config.json of the checkpoint the root model (or the model `model` of the file) was loaded
    from, or None where it was loaded from none, or from one without a config."""
    for spec in program.pretrained:
        if (spec.model == model) if model is not None else spec.prefix == ():
            if os.path.isfile(config_path(spec.path)):
                try:
                    return read(spec.path)[1]
                except ConfigError as e:
                    raise RunError(f"cannot read {e.file}: {e}")
    return None


def config_of(program: ir.Program, mapping: str) -> dict | None:
    """The `config.json` of the root model exported through `mapping` (a standard-library mapping, or a
    model of the file with `:names`); None for a mapping of the file's own whose checkpoint has no config."""
    if mapping not in ARCHITECTURES or any(spec.model == mapping and spec.named for spec in program.pretrained):
        return source_config(program, mapping)
    params = [p for p in program.params]
    shapes = {".".join(p.path): tuple(p.shape) for p in params}
    dtypes = {p.dtype for p in params}
    dtype = _TORCH_DTYPES.get(next(iter(dtypes)), "float32") if len(dtypes) == 1 else "float32"
    return export_config(mapping, shapes, dict(program.settings), source_config(program), dtype)


def _text_writer(text: str):
    return lambda tmp: Path(tmp).write_text(text, encoding="utf-8")


def export_extras(program: ir.Program, mapping: str) -> list[tuple[str, object]]:
    """The files an export through `mapping` writes beside the weights, as (name, writer) pairs for
    export_files.write_export: `config.json` (where there is one, `config_of`), and the run's
    tokenizer.json with a tokenizer_config.json (where its loaders read one, `run_tokenizer`)."""
    config = config_of(program, mapping)
    out = [] if config is None else [(CONFIG, _text_writer(json.dumps(config, indent=2, sort_keys=True) + "\n"))]
    return out + tokenizer_files(program)


def tokenizer_files(program: ir.Program) -> list[tuple[str, object]]:
    """The run's tokenizer.json (`run_tokenizer`, copied) and a tokenizer_config.json naming transformers'
    fast tokenizer, as (name, writer) pairs; none when the run reads no tokenizer."""
    out = []
    tok = run_tokenizer(program)
    if tok is not None:
        def copy(tmp, tok=tok):
            try:
                shutil.copyfile(tok, tmp)
            except OSError as e:
                raise RunError(f"cannot copy the tokenizer {tok} to {Path(tmp).parent / 'tokenizer.json'}: "
                               f"{e.strerror or e}")
        out.append(("tokenizer.json", copy))
        out.append(("tokenizer_config.json",
                    _text_writer(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}, indent=2) + "\n")))
    return out


def write_config(program: ir.Program, directory: Path, mapping: str) -> Path | None:
    """Write `directory/config.json` alone (`config_of`), under a temporary name renamed into place. The
    path written, or None for a mapping of the file's own whose checkpoint has no config."""
    config = config_of(program, mapping)
    if config is None:
        return None
    path = Path(directory) / CONFIG
    _write(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def run_tokenizer(program: ir.Program) -> str | None:
    """The tokenizer.json the run's loaders tokenize with (the training loader's first), or None."""
    loaders = [program.loaders[program.run.loader]] if program.run.loader in program.loaders else []
    loaders += [l for l in program.loaders.values() if l not in loaders]
    for loader in loaders:
        tok = loader.source[1].get("tokenizer")
        if isinstance(tok, str):
            try:
                return resolve_path(loader, tok)
            except LoaderError as e:
                raise RunError(str(e))
    return None


def write_tokenizer(program: ir.Program, directory: Path) -> list[Path]:
    """Copy the run's tokenizer.json into `directory` with a tokenizer_config.json, alone (each under a
    temporary name renamed into place); the paths written (none when the run has no tokenizer)."""
    written = []
    for name, writer in tokenizer_files(program):
        path = Path(directory) / name
        tmp = Path(directory) / f".{name}.tmp"
        try:
            writer(tmp)
            publish(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise RunError(f"cannot write {path}: {e.strerror or e}")
        except RunError:
            tmp.unlink(missing_ok=True)
            raise
        written.append(path)
    return written
