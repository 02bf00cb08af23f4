#!/usr/bin/env bash
# Build, package and test the VS Code extension: .ci/run calls this.
#   npm ci; npm run build (tsc --noEmit, then esbuild); npm run package (vsce, sexpgpu.vsix);
#   npm test (vscode-tmgrammar-test over test/*.test.sx); and a check that the grammar's
#   word lists (operations, forms, dtypes) still match sexpgpu_lang.
# Nothing here downloads VS Code.
set -euo pipefail
cd "$(dirname "$0")"

npm ci --no-audit --no-fund
npm run build
rm -f sexpgpu.vsix
npm run package </dev/null
test -s sexpgpu.vsix
npm test

if [ -n "${PYTHON:-}" ]; then
  py="$PYTHON"
elif [ -x ../.venv/bin/python ]; then
  py=../.venv/bin/python
else
  py=python3
fi
"$py" scripts/gen-grammar.py --check
