"""The `sexpgpu` command line: thin shells over sexpgpu_lang and sexpgpu_runtime."""
