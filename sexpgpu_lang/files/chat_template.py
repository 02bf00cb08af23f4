"""A tokenizer's chat template, rendered as transformers' `apply_chat_template(..., add_generation_prompt=True)` does.

A prompt source's column of chat messages (each row a list of objects with
`role` and `content`) becomes text through the template of the tokenizer it
names, then ids (prompt_encoder.py). The template is found beside the
tokenizer.json, where `save_pretrained` writes it: `chat_template.jinja`
first (transformers reads that before the config), else
`tokenizer_config.json`'s `chat_template` (a string, or a list of
`{name, template}` of which `default` is taken). The special tokens the
template may read (`bos_token`, `eos_token`, `unk_token`, `sep_token`,
`pad_token`, `cls_token`, `mask_token`) come from `tokenizer_config.json`
(a string, or an object's `content`), then `special_tokens_map.json`.

Rendering follows transformers (its `utils/chat_template_utils.py`, read for
the rules): jinja2's `ImmutableSandboxedEnvironment` with `trim_blocks` and
`lstrip_blocks` and the `loopcontrols` extension; a `tojson` filter that is
`json.dumps` (not HTML-escaped, `ensure_ascii=False`); the globals
`raise_exception` (a TemplateError with the template's message), `dict` and
`namespace` (one that refuses names starting with `_`); a `{% generation %}`
block renders its body; each message's keys holding null are dropped; a
message's `reasoning_content`/`thinking`/`reasoning` is given under the first
two names too; the template sees `messages`, `tools` and `documents` (None),
`add_generation_prompt=True` and the special tokens. One difference:
`strftime_now` (today's date) is not given, so that a run stays a pure
function of its file and data: a template that reads the date takes its own
fallback (Llama 3.1's: "26 Jul 2024").

jinja2 is imported when a template is first compiled, never at start-up
(`sexpgpu lint` imports none of it: tests/test_cli_startup.py).
"""
from __future__ import annotations

import json
import os

#: The special tokens a template is given, as transformers' SPECIAL_TOKENS_ATTRIBUTES names them.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")

#: The names a message's reasoning is given under (transformers' _REASONING_FIELDS).
_REASONING = ("reasoning_content", "thinking", "reasoning")

#: The most bytes of a tokenizer_config.json or chat_template.jinja read (a config with a template is a few KB).
CONFIG_LIMIT = 16 << 20


class NoChatTemplate(Exception):
    """The tokenizer's directory holds no chat template, or one that cannot be read or compiled: `str(e)`
    is the reason and fix, naming the file (and a syntax error's line)."""


class RenderError(Exception):
    """A row's messages that the template refuses or fails on: `str(e)` is the template's own error,
    as `TypeName: message` (`raise_exception`'s message is a TemplateError's)."""


class ChatTemplate:
    """The chat template beside a tokenizer.json and the special tokens it reads.

    `ChatTemplate.beside(tokenizer_path)` loads it (NoChatTemplate when there is none);
    `render(messages)` gives one row's text (RenderError)."""

    def __init__(self, source: str, where: str, specials: dict[str, str]):
        self.source, self.where, self.specials = source, where, specials
        self._compiled = None

    @classmethod
    def beside(cls, tokenizer_path: str) -> "ChatTemplate":
        """The template of the tokenizer.json at `tokenizer_path`, from its directory (module docstring)."""
        from .bounded_read import read_bounded
        folder = os.path.dirname(os.path.abspath(tokenizer_path))
        config_path = os.path.join(folder, "tokenizer_config.json")
        jinja_path = os.path.join(folder, "chat_template.jinja")
        config = _json_object(config_path)
        specials = _specials(config)
        for key, value in _specials(_json_object(os.path.join(folder, "special_tokens_map.json"))).items():
            specials.setdefault(key, value)
        if os.path.isfile(jinja_path):
            try:
                text = read_bounded(jinja_path, CONFIG_LIMIT, "a chat template").decode("utf-8")
            except (OSError, ValueError) as e:
                raise NoChatTemplate(f"the chat template {jinja_path} cannot be read ({e})") from None
            return cls(text, jinja_path, specials)
        template = config.get("chat_template")
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if not isinstance(template, str):
            raise NoChatTemplate(f"the tokenizer's directory {folder} has no chat template (no chat_template.jinja, "
                                 "and no `chat_template` string in tokenizer_config.json); put the model's "
                                 "tokenizer_config.json beside tokenizer.json, or store the prompts as text")
        return cls(template, config_path, specials)

    def compiled(self):
        """The jinja2 template, compiled once (NoChatTemplate naming the line of a syntax error)."""
        if self._compiled is None:
            import jinja2
            try:
                self._compiled = _environment().from_string(self.source)
            except jinja2.TemplateSyntaxError as e:
                raise NoChatTemplate(f"the chat template in {self.where} does not compile (line {e.lineno} of the "
                                     f"template: {e.message}); fix the template") from None
        return self._compiled

    def render(self, messages: list) -> str:
        """The text of one conversation (`messages`: a list of dicts, JSON values) with the generation
        prompt added. RenderError with the template's error; NoChatTemplate when it does not compile."""
        template = self.compiled()
        chat = []
        for message in messages:
            m = {k: v for k, v in message.items() if v is not None}
            reasoning = next((m[k] for k in _REASONING if m.get(k) is not None), None)
            if reasoning is not None:
                m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
            chat.append(m)
        try:
            return template.render(messages=chat, tools=None, documents=None, add_generation_prompt=True,
                                   **self.specials)
        except Exception as e:   # the template is code: any error it raises is the row's
            return _raise_render(e)


def _raise_render(e: Exception):
    """Raise RenderError worded from the template's error `e`."""
    import jinja2
    name = "TemplateError" if isinstance(e, jinja2.TemplateError) and type(e) is jinja2.TemplateError else type(e).__name__
    raise RenderError(f"{name}: {e}") from None


def _json_object(path: str) -> dict:
    """The JSON object in the file at `path`, or {} where there is none (or it is not an object)."""
    from .bounded_read import loads_json, read_bounded
    if not os.path.isfile(path):
        return {}
    try:
        data = loads_json(read_bounded(path, CONFIG_LIMIT, "a tokenizer config").decode("utf-8"))
    except (OSError, ValueError) as e:
        raise NoChatTemplate(f"{path} cannot be read ({e}); give the model's tokenizer_config.json") from None
    return data if isinstance(data, dict) else {}


def _specials(config: dict) -> dict[str, str]:
    """The special tokens of a tokenizer config: each a string, or an AddedToken object's `content`."""
    out = {}
    for key in SPECIAL_TOKENS:
        v = config.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[key] = v
    return out


_ENV = None


def _environment():
    """The jinja2 environment transformers renders chat templates in (module docstring), made once."""
    global _ENV
    if _ENV is not None:
        return _ENV
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.utils
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: its body, rendered (transformers tracks the span)."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """jinja2's namespace, refusing attributes that start with `_`."""
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a chat template may not set {name!r} on a namespace")

    class Dict:
        """`dict(...)` in a template, without the type's own attributes."""
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["dict"] = Dict()
    env.globals["namespace"] = Namespace
    _ENV = env
    return env
