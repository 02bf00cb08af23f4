#!/bin/sh
# Install Neovim (Debian's package, 0.7 on bookworm) for tests/test_neovim.py
# when it is not already on PATH. .ci/run calls this; needs root for apt-get.
set -e
command -v nvim >/dev/null 2>&1 || (apt-get update && apt-get install -y neovim)
version=$(nvim --version)   # (a failing binary fails this step: no pipe hides its status)
echo "$version" | head -n 1
