"""The judge: each program or run file checked, lowered by the runtime and run by JAX, the verdicts
compared and explained by a rule (rules.py) or counted as a disagreement; `run` and `run_phases`
draw and judge many.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from sexpgpu_lang.check import check_expression
from sexpgpu_lang.ops import REGISTRY

from .expressions import expr, random_env
from .faults import ill_typed
from .jax_direct import NOT_JUDGED, first_line, jax_verdict, phase_jax_verdicts
from .rules import lenient_rule, phase_lenient_rule, phase_rule, strict_rule
from .run_files import PhaseFile, phase_file
from .runtime_check import lower, phase_runtime


@dataclass
class Tally:
    """Counts of one run: the well-typed direction (programs the checker accepts) and the
    ill-typed one (programs it rejects), and every unexplained disagreement."""

    programs: int = 0
    accepted: int = 0
    runtime_fails: int = 0
    accepted_jax_agrees: int = 0
    lenient: Counter = field(default_factory=Counter)
    rejected: int = 0
    rejected_jax_refuses: int = 0
    strict: Counter = field(default_factory=Counter)
    covered: Counter = field(default_factory=Counter)
    disagreements: list = field(default_factory=list)

    def judge(self, text: str, env, source: str) -> str:
        """Check `text`, then ask the runtime (accepted) and JAX itself (both); returns the verdict."""
        self.programs += 1
        try:
            e, diags = check_expression(text, env)
        except Exception as exc:  # noqa: BLE001 - the checker must never raise
            self.disagreements.append((text, env, f"checker raised {type(exc).__name__}: {exc}"))
            return "unexplained"
        errors = [d for d in diags if d.is_error]
        verdict = jax_verdict(text, env)
        if e is None or errors:
            self.rejected += 1
            if source:
                self.covered[source] += 1
            if verdict is not None:
                self.rejected_jax_refuses += 1
                return "agree"
            rule = strict_rule(errors)
            if rule is None:
                self.disagreements.append((text, env, "rejected ("
                                           + "; ".join(f"{d.code} {d.message}" for d in errors) + "), JAX lowers it"))
                return "unexplained"
            self.strict[rule] += 1
            return f"strict:{rule}"
        self.accepted += 1
        why = lower(e, env)
        if why:
            self.runtime_fails += 1
            self.disagreements.append((text, env, f"accepted, the runtime disagrees: {why}"))
            return "unexplained"
        if verdict is None:
            self.accepted_jax_agrees += 1
            return "agree"
        rule = lenient_rule(verdict)
        if rule is None:
            self.disagreements.append((text, env, f"accepted, JAX refuses: {verdict}"))
            return "unexplained"
        self.lenient[rule] += 1
        return f"lenient:{rule}"

    def report(self) -> str:
        lines = [f"well-typed direction: {self.accepted} programs the checker accepts",
                 f"  the runtime lowers it, JAX's type at every node: {self.accepted - self.runtime_fails}",
                 f"  JAX's own functions lower it too (agree): {self.accepted_jax_agrees}"]
        lines += [f"  intentional-lenient {k}: {n}" for k, n in sorted(self.lenient.items())]
        lines += [f"ill-typed direction: {self.rejected} programs the checker rejects",
                  f"  JAX refuses it too (agree): {self.rejected_jax_refuses}"]
        lines += [f"  intentional-strict {k}: {n}" for k, n in sorted(self.strict.items())]
        lines.append(f"unexplained disagreements: {len(self.disagreements)}")
        return "\n".join(lines)


def run(n_random: int, n_ill: int, seed: int, depth: int = 3, progress=None) -> Tally:
    """`n_random` random compositions (mostly the well-typed direction) and `n_ill` ill-typed calls
    (each op in turn, one fault each), judged by the checker, the runtime and JAX."""
    rng = random.Random(seed)
    tally = Tally()
    ops = sorted(REGISTRY)
    for i in range(n_random):
        env = random_env(rng)
        tally.judge(expr(rng, env, depth, top=True), env, "")
        if progress and (i + 1) % 500 == 0:
            progress(f"random {i + 1}/{n_random}")
    for i in range(n_ill):
        text, env, op, fault = ill_typed(rng, ops[i % len(ops)])
        tally.judge(text, env, op)
        if progress and (i + 1) % 500 == 0:
            progress(f"ill-typed {i + 1}/{n_ill}")
    return tally


def generator_only(text: str) -> str:
    """The file with a trivial objective (the model's product, reduced): what the checker says of
    its generator alone."""
    head, rest = text.split("(objective", 1)
    return head + "(objective (lambda (batch ctx) (let* ((p (m 1.0))) (mean (cast p :f32)))))\n\n" + rest[rest.index("(run "):]


@dataclass
class PhaseTally:
    """Counts over whole run files, per kind of file, and per phase (`generate`, `objective`) the
    checker's verdict against JAX's; and the unexplained disagreements."""

    files: int = 0
    accepted: Counter = field(default_factory=Counter)      # kind ("step keep", "loss ok"...) -> files
    rejected: Counter = field(default_factory=Counter)
    runtime_ok: int = 0
    codes: Counter = field(default_factory=Counter)
    phases: Counter = field(default_factory=Counter)        # (phase, outcome) -> count
    disagreements: list = field(default_factory=list)

    def judge(self, pf: PhaseFile) -> str:
        """The checker's verdict on each phase against JAX's: the generator's errors are those the
        file gives with a trivial objective (`generator_only`); the objective is judged when the
        checker accepts the generator (so no error is hidden behind it), all the file's errors its own.
        Returns the first outcome other than agreement, else "agree"."""
        from sexpgpu_lang import analyze
        self.files += 1
        kinds = (f"step {pf.step_kind}", f"loss {pf.loss_kind}", f"precision {pf.precision}", f"stack {pf.stack}",
                 f"model {'repeated' if pf.layers else 'plain'}, remat {pf.remat or 'none'}", f"until {pf.until_kind}")
        try:
            res = analyze(pf.text, "phases.sx")
            errors = [d for d in res.diagnostics if d.is_error]
            accepted = not errors and res.program is not None
            gen_errors = [] if accepted else [d for d in analyze(generator_only(pf.text), "g.sx").diagnostics
                                              if d.is_error]
        except Exception as exc:  # noqa: BLE001 - the checker must never raise
            self.disagreements.append((pf.text, f"checker raised {first_line(exc)}"))
            return "unexplained"
        verdicts, carry = phase_jax_verdicts(pf)
        outcomes = []
        (self.accepted if accepted else self.rejected).update(kinds)
        if accepted:
            why = phase_runtime(res.program)
            if why:
                self.disagreements.append((pf.text, f"accepted, the runtime disagrees: {why}"))
                outcomes.append("unexplained")
            else:
                self.runtime_ok += 1
        else:
            self.codes.update({d.code for d in errors})
        judged = {"generate": gen_errors} if gen_errors else {"generate": [], "objective": errors}
        for phase, errs in judged.items():
            v = verdicts[phase]
            if v is NOT_JUDGED:
                self.phases[(phase, "not judged: JAX cannot run the generator")] += 1
                continue
            if errs and v is not None:
                outcome = "agree: both refuse"
            elif not errs and v is None:
                outcome = "agree: both run"
            elif errs:
                rule = phase_rule(errs, carry if phase == "generate" else {})
                outcome = f"strict:{rule}" if rule else "unexplained"
                why = "rejected (" + "; ".join(f"{d.code} {d.message}" for d in errs) + "), JAX runs it"
            else:
                rule = phase_lenient_rule(v, pf)
                outcome = f"lenient:{rule}" if rule else "unexplained"
                why = f"accepted, JAX refuses: {v}"
            if outcome == "unexplained":
                self.disagreements.append((pf.text, f"{phase}: {why}"))
            self.phases[(phase, outcome)] += 1
            outcomes.append(outcome)
        return next((o for o in outcomes if not o.startswith("agree")), "agree")

    def report(self) -> str:
        acc, rej = sum(self.accepted.values()) // 6, sum(self.rejected.values()) // 6   # 6 kinds a file
        kinds = sorted(set(self.accepted) | set(self.rejected))
        lines = [f"{self.files} run files: {acc} the checker accepts (the runtime lowers every graph, JAX's type "
                 f"for every phase output: {self.runtime_ok}), {rej} it rejects ("
                 + ", ".join(f"{c} {n}" for c, n in self.codes.most_common()) + ")",
                 "per kind, accepted / rejected:"]
        lines += [f"  {k}: {self.accepted[k]} / {self.rejected[k]}" for k in kinds]
        names = {"agree: both run": "checker accepts, JAX runs it (agree)",
                 "agree: both refuse": "checker rejects, JAX refuses it (agree)"}
        for phase in ("generate", "objective"):
            lines.append(f"{phase} phase:")
            for (ph, o), n in sorted(self.phases.items()):
                if ph == phase:
                    label = names.get(o) or (f"intentional-{o.replace(':', ' ', 1)}" if ":" in o and not o.startswith("not")
                                             else o)
                    lines.append(f"  {label}: {n}")
        lines.append(f"unexplained disagreements: {len(self.disagreements)}")
        return "\n".join(lines)


def run_phases(n: int, seed: int, depth: int = 2, progress=None) -> PhaseTally:
    """`n` random run files, each judged by the checker, the runtime and JAX."""
    rng = random.Random(seed)
    tally = PhaseTally()
    for i in range(n):
        tally.judge(phase_file(rng, depth))
        if progress and (i + 1) % 50 == 0:
            progress(f"files {i + 1}/{n}")
    return tally
