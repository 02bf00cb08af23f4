"""sexpgpu_runtime: the checked IR of sexpgpu_lang, lowered to JAX and trained.

Depends on sexpgpu_lang, never the other way around. Importing it enables
JAX's 64-bit types (the trip and `:step` are i64; docs/dev/design.md#types).
"""
import jax

jax.config.update("jax_enable_x64", True)
