"""Data: the loaders and the sources their records come from.

`loaders` holds the `Loader` (a deterministic, resumable order over a
source's records) and the in-memory tables; `token_files` and
`token_loaders` the memory-mapped token files and the `tokens` and
`text-tokens` sources; `prompt_files` the `jsonl` and `parquet` prompt
sources; `tokenize` Hugging Face tokenizers and the cached token files they
make; `prefetch` the training batches read ahead on a thread. Everything
here is NumPy on the host: nothing imports JAX.
"""
