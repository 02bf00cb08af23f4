"""`python -m lsp`: the language server on stdin and stdout (as `sexpgpu lsp`)."""
from lsp.server import main

main()
