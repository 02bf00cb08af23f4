"""Reward functions the tests/cases-files cases name (read with `ast` by the checker, never imported by lint)."""


def score(prompts, completions):
    """1.0 for a completion that is the prompt's sum (`"3+5="` wants `"08"`), else 0.0."""
    out = []
    for p, c in zip(prompts, completions):
        a, b = p.rstrip("=").split("+")
        out.append(float(c == f"{int(a) + int(b):02d}"))
    return out


def by_answer(prompts, answers):
    """Named `answers` where the call passes `completions`: E-REWARD-003."""
    return [0.0 for _ in answers]
