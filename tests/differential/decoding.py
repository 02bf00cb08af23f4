"""The differential check's part for decoding (issue 19): `dynamic-slice`, `dynamic-update-slice` and
`at-set` as a JAX user writes them (`DIRECT_DECODING`, merged into `jax_direct.DIRECT`). The deliberate
differences they bring and their random calls are in decoding_calls.py (text only: `STRICT_DECODING`
and `LENIENT_DECODING`, made `rules.Rule`s in rules.py; `decoding_args`, read by `expressions.expr`),
so both directions of the check cover them.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def _starts(starts):
    return [jnp.asarray(s) if isinstance(s, list) else s for s in starts]


def _at_set(x, index, value):
    return x.at[tuple(_starts(index))].set(value)


#: Each op as a JAX user writes it: `lax.dynamic_slice(x, starts, sizes)`,
#: `lax.dynamic_update_slice(x, update, starts)`, `x.at[i, j].set(v)`.
DIRECT_DECODING = {
    "dynamic-slice": lambda x, starts, sizes, **k: lax.dynamic_slice(x, _starts(starts), sizes, **k),
    "dynamic-update-slice": lambda x, u, starts, **k: lax.dynamic_update_slice(x, u, _starts(starts), **k),
    "at-set": lambda x, index, v, **k: _at_set(x, index, v),
}


def _categorical(lg, *, temperature=None, **k):
    """`jax.random.categorical` as a user writes temperature, top-k and top-p around it: the logits
    scaled, `lax.top_k`'s k largest kept (all of them, sorted, for top-p alone), the nucleus masked
    with `-inf`, the draw mapped back through top_k's indices."""
    import jax
    from .jax_direct import _key   # (jax_direct merges this table into its own)
    top_k, top_p = k.pop("top-k", None), k.pop("top-p", None)
    lg = lg if temperature is None else lg / temperature
    if top_k is None and top_p is None:
        return jax.random.categorical(_key(k), lg, **k)
    values, index = lax.top_k(lg, top_k if top_k is not None else lg.shape[-1])
    if top_p is not None:
        probs = jax.nn.softmax(values, axis=-1)
        values = jnp.where(jnp.cumsum(probs, axis=-1) - probs < top_p, values, -jnp.inf)
    pick = jax.random.categorical(_key(k), values, **k)
    return jnp.take_along_axis(index, pick[..., None], axis=-1)[..., 0]


DIRECT_DECODING["categorical"] = _categorical
