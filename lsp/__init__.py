"""The SexpGPU language server (pygls), built on sexpgpu_lang."""
