// The client's start-up path, run on the built bundle (dist/extension.js) in
// plain Node with a stand-in `vscode` module: no VS Code is downloaded.
// Checks that a missing server command gives one clear error naming the
// setting and how to install, and that a present one is found on PATH.
const assert = require("node:assert/strict");
const fs = require("node:fs");
const Module = require("node:module");
const os = require("node:os");
const path = require("node:path");
const test = require("node:test");

function fakeVscode(settings) {
  const calls = { errors: [], lines: [], commands: [] };
  const disposable = { dispose() {} };
  const api = {
    window: {
      createOutputChannel: () => ({ appendLine: (l) => calls.lines.push(l), dispose() {} }),
      showErrorMessage: (message, ...items) => {
        calls.errors.push({ message, items });
        return Promise.resolve(undefined);
      },
    },
    commands: {
      registerCommand: (name) => {
        calls.commands.push(name);
        return disposable;
      },
      executeCommand: () => Promise.resolve(),
    },
    workspace: {
      workspaceFolders: undefined,
      onDidChangeConfiguration: () => disposable,
      getConfiguration: () => ({ get: (key, fallback) => (key in settings ? settings[key] : fallback) }),
    },
  };
  // vscode-languageclient touches more of the API when it loads: give it inert stand-ins.
  const inert = new Proxy(function () {}, { get: () => inert, construct: () => inert, apply: () => inert });
  const vscode = new Proxy(api, { get: (target, key) => (key in target ? target[key] : inert) });
  return { vscode, calls };
}

function loadExtension(settings) {
  const { vscode, calls } = fakeVscode(settings);
  const bundle = path.resolve(__dirname, "..", "dist", "extension.js");
  assert.ok(fs.existsSync(bundle), "run `npm run build` first");
  const originalLoad = Module._load;
  Module._load = function (request, ...rest) {
    return request === "vscode" ? vscode : originalLoad.call(this, request, ...rest);
  };
  try {
    delete require.cache[bundle];
    return { extension: require(bundle), calls };
  } finally {
    Module._load = originalLoad;
  }
}

test("a missing server command gives one error naming the setting and how to install", async () => {
  const { extension, calls } = loadExtension({ "sexpgpu.server.command": "sexpgpu-not-installed-anywhere" });
  const context = { subscriptions: [] };
  await extension.activate(context);
  assert.equal(calls.errors.length, 1);
  const { message, items } = calls.errors[0];
  assert.match(message, /`sexpgpu-not-installed-anywhere` was not found/);
  assert.match(message, /sexpgpu\.server\.command/);
  assert.match(message, /pip install/);
  assert.deepEqual(items, ["Open Settings", "Retry"]);
  assert.ok(calls.commands.includes("sexpgpu.restartServer"));
  await extension.deactivate();
});

test("a server path that does not exist is reported the same way", async () => {
  const { extension, calls } = loadExtension({ "sexpgpu.server.command": "/nonexistent/.venv/bin/sexpgpu" });
  await extension.activate({ subscriptions: [] });
  assert.equal(calls.errors.length, 1);
  assert.match(calls.errors[0].message, /`\/nonexistent\/\.venv\/bin\/sexpgpu` was not found/);
  await extension.deactivate();
});

test("findExecutable looks the command up on PATH and skips files that cannot run", () => {
  const { extension } = loadExtension({});
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sexpgpu-path-"));
  const plain = path.join(dir, "plain");
  fs.writeFileSync(plain, "");
  fs.chmodSync(plain, 0o644);
  const program = path.join(dir, "sexpgpu");
  fs.writeFileSync(program, "#!/bin/sh\n");
  fs.chmodSync(program, 0o755);
  const env = { PATH: ["/nonexistent", dir].join(path.delimiter) };
  assert.equal(extension.findExecutable("sexpgpu", env), program);
  assert.equal(extension.findExecutable("plain", env), undefined);
  assert.equal(extension.findExecutable("missing", env), undefined);
  assert.equal(extension.findExecutable(program, env), program);
});
