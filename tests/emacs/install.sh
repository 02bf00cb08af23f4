#!/bin/sh
# Install Emacs with eglot (Debian's `emacs-nox` 28 and `elpa-eglot` 1.9 on bookworm) for
# tests/test_emacs.py when `emacs` is not already on PATH. .ci/run calls this; needs root for apt-get.
set -e
command -v emacs >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y emacs-nox elpa-eglot)
version=$(emacs --version)   # (a failing binary fails this step: no pipe hides its status)
echo "$version" | head -n 1
