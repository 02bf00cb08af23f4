"""The reward of examples/grpo-arith.sx: is the completion the sum the prompt asks for?

`sexpgpu run` imports this file and calls `score` on the host once per microbatch, after the
generator's `:finish`: `prompts` and `completions` are the decoded rows (`"3+5="` and `"08"`), and
the result, one float per row, joins the batch as `:reward`. It must be pure (the same rows give
the same rewards), so a resumed run gets the rewards it had.
"""


def score(prompts, completions):
    """The share of the answer's two characters that are right: `"3+5="` wants `"08"`, so `"08"`
    scores 1.0, `"09"` 0.5 and `"+="` 0.0."""
    out = []
    for prompt, completion in zip(prompts, completions):
        a, b = prompt.rstrip("=").split("+")
        want = f"{int(a) + int(b):02d}"
        out.append(sum(c == w for c, w in zip(completion, want)) / len(want))
    return out
