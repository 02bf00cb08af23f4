"""Parity of chat prompts with transformers' `apply_chat_template(..., add_generation_prompt=True)`.

    /work/refvenv/bin/python -m benchmarks.hf_chat_template            # compare, print what differs
    /work/refvenv/bin/python -m benchmarks.hf_chat_template --write    # and (re)write tests/fixtures/chat/

Needs the `reference` extra (transformers); nothing downloads. A byte-level BPE tokenizer is trained
here on a few lines (sexpgpu_cli.tokenizer.train_bpe, `sexpgpu tokenizer train`'s trainer) with the
special tokens of two chat formats, and saved twice beside a chat template:

- `qwen2/`: Qwen2's template (a default system prompt, `<|im_start|>`/`<|im_end|>`), in
  tokenizer_config.json's `chat_template`;
- `llama3/`: Llama 3's template (`bos_token`, `<|start_header_id|>`, `| trim`), written over several
  lines (`trim_blocks`, `lstrip_blocks` matter) with a `raise_exception` on a conversation that
  does not start with a system or user message, in chat_template.jinja (as transformers 5 saves it).

conversations.jsonl holds chat prompts of different lengths (one, two and four messages; text
outside ASCII; content with spaces to trim). For each template, transformers loads the directory
(`AutoTokenizer.from_pretrained`) and gives each conversation's ids and text; expected.json holds
them, and the error transformers raises on a conversation the llama3 template refuses.
tests/test_chat_template.py checks sexpgpu's ids against them without transformers.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "chat"

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>")

CORPUS = """You are a helpful assistant. What is two plus two? Two plus two is four.
Name a colour of the sky. The sky is blue by day and black by night.
Écris une phrase en français. Le café est chaud.
user assistant system: answer briefly, in one line.
""" * 8

QWEN2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
         "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
         "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = """{% if messages[0]['role'] not in ['system', 'user'] %}
    {{ raise_exception('Conversations start with a system or user message, not ' + messages[0]['role']) }}
{% endif %}
{% set loop_messages = messages %}
{% for message in loop_messages %}
    {% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}
    {% if loop.index0 == 0 %}
        {% set content = bos_token + content %}
    {% endif %}
    {{ content }}
{% endfor %}
{% if add_generation_prompt %}
    {{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{% endif %}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "What is two plus two?"}],
    [{"role": "system", "content": "Answer briefly, in one line."},
     {"role": "user", "content": "  Name a colour of the sky.  "}],
    [{"role": "user", "content": "Écris une phrase en français."},
     {"role": "assistant", "content": "Le café est chaud. ☕", "reasoning_content": "une phrase"},
     {"role": "user", "content": "What is two plus two?", "name": None}],
    [{"role": "user", "content": "Hi"}],
]

#: A conversation the llama3 template refuses with raise_exception.
REFUSED = [{"role": "assistant", "content": "I start."}]

CONFIGS = {
    "qwen2": {"chat_template": QWEN2, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
              "tokenizer_class": "PreTrainedTokenizerFast"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>", "__type": "AddedToken"},
               "tokenizer_class": "PreTrainedTokenizerFast"},
}


def write_fixtures(out: Path) -> None:
    """The tokenizer, the two template directories and conversations.jsonl under `out`."""
    from sexpgpu_cli.tokenizer import train_bpe
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text(CORPUS, encoding="utf-8")
        train_bpe([str(corpus)], 320, str(Path(tmp) / "tokenizer.json"), special_tokens=SPECIALS)
        for name, config in CONFIGS.items():
            (out / name).mkdir(exist_ok=True)
            shutil.copy(Path(tmp) / "tokenizer.json", out / name / "tokenizer.json")
            (out / name / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "llama3" / "chat_template.jinja").write_text(LLAMA3)
    (out / "conversations.jsonl").write_text("".join(json.dumps({"prompt": c}, ensure_ascii=False) + "\n"
                                                     for c in CONVERSATIONS), encoding="utf-8")


def reference(out: Path) -> dict:
    """transformers' ids and text of each conversation under each template in `out`, and its error on REFUSED."""
    import transformers
    from transformers import AutoTokenizer
    expected = {"transformers": transformers.__version__}
    for name in CONFIGS:
        tok = AutoTokenizer.from_pretrained(str(out / name))
        expected[name] = {
            "ids": [list(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False))
                    for c in CONVERSATIONS],
            "text": [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in CONVERSATIONS],
        }
    tok = AutoTokenizer.from_pretrained(str(out / "llama3"))
    try:
        tok.apply_chat_template(REFUSED, add_generation_prompt=True, tokenize=False)
        expected["llama3"]["refused"] = None
    except Exception as e:   # jinja2's TemplateError, raised by the template
        expected["llama3"]["refused"] = f"{type(e).__name__}: {e}"
    return expected


def ours(out: Path) -> dict:
    """sexpgpu's ids of each conversation under each template in `out` (prompt_encoder.PromptEncoder)."""
    from tokenizers import Tokenizer
    from sexpgpu_lang.files.prompt_encoder import PromptEncoder
    got = {}
    for name in CONFIGS:
        path = str(out / name / "tokenizer.json")
        enc = PromptEncoder(Tokenizer.from_file(path), path)
        got[name] = [enc.ids(c, "chat") for c in CONVERSATIONS]
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="(re)write tests/fixtures/chat/")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = FIXTURES if a.write else Path(tmp)
        write_fixtures(out)
        expected = reference(out)
        got = ours(out)
        if a.write:
            (out / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    bad = 0
    for name in CONFIGS:
        for i, (mine, theirs) in enumerate(zip(got[name], expected[name]["ids"])):
            same = mine == theirs
            bad += not same
            print(f"{name} conversation {i}: {len(theirs)} ids, {'same' if same else 'DIFFERENT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
