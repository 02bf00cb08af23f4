"""Readers of the files a run file names: bounded, safe, shared by `lint --read-files`, the language server and `sexpgpu run` (ARCHITECTURE.md, "sexpgpu_lang/files/")."""
