"""The run's optimizer as an optax GradientTransformation (`:optimizer (adam :lr 3e-3)`)."""
from __future__ import annotations

import optax


def make_optimizer(spec: tuple[str, dict]) -> optax.GradientTransformation:
    """Build `(adam|adamw|sgd|lion :lr ... )`; `:clip` adds global-norm clipping first."""
    name, a = spec
    lr = float(a.get("lr", 1e-3))
    if name == "adam":
        opt = optax.adam(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.999)), eps=float(a.get("eps", 1e-8)))
    elif name == "adamw":
        opt = optax.adamw(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.999)), eps=float(a.get("eps", 1e-8)),
                          weight_decay=float(a.get("weight-decay", 1e-4)))
    elif name == "sgd":
        m = a.get("momentum")
        opt = optax.sgd(lr, momentum=float(m) if m is not None else None)
    elif name == "lion":
        opt = optax.lion(lr, b1=float(a.get("b1", 0.9)), b2=float(a.get("b2", 0.99)),
                         weight_decay=float(a.get("weight-decay", 1e-3)))
    else:  # the checker admits only the names above
        raise ValueError(f"unknown optimizer {name}")
    if a.get("clip") is not None:
        opt = optax.chain(optax.clip_by_global_norm(float(a["clip"])), opt)
    return opt
