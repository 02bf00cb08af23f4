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

function fakeVscode(settings, { folders, interpreter } = {}) {
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
    extensions: {
      // The Python extension's API (ms-python.python): its selected interpreter, when the test gives one.
      getExtension: (id) => (id === "ms-python.python" && interpreter ? {
        isActive: true,
        exports: { environments: { getActiveEnvironmentPath: () => ({ path: interpreter }) } },
      } : undefined),
    },
    workspace: {
      workspaceFolders: folders ? folders.map((f) => ({ uri: { fsPath: f } })) : undefined,
      onDidChangeConfiguration: () => disposable,
      getConfiguration: () => ({ get: (key, fallback) => (key in settings ? settings[key] : fallback) }),
    },
  };
  // vscode-languageclient touches more of the API when it loads (and starts): give it inert stand-ins.
  const inert = new Proxy(function () {}, { get: () => inert, construct: () => inert, apply: () => inert });
  const withInert = (object) => new Proxy(object, { get: (target, key) => (key in target ? target[key] : inert) });
  api.workspace = withInert(api.workspace);
  api.window = withInert(api.window);
  const vscode = withInert(api);
  return { vscode, calls };
}

function loadExtension(settings, workspace) {
  const { vscode, calls } = fakeVscode(settings, workspace);
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
  assert.match(message, /looked in: sexpgpu-not-installed-anywhere on PATH \(/);
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

function program(dir, name = "sexpgpu") {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, name);
  fs.writeFileSync(file, "#!/bin/sh\n");
  fs.chmodSync(file, 0o755);
  return file;
}

test("findServer looks in the workspace's .venv, then beside the Python interpreter, then on PATH", () => {
  const { extension } = loadExtension({});
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "sexpgpu-find-"));
  const project = path.join(root, "project");
  const interpreterDir = path.join(root, "conda", "bin");
  const onPath = program(path.join(root, "path-bin"));
  const env = { PATH: path.join(root, "path-bin") };
  const interpreters = [path.join(interpreterDir, "python")];

  // Only on PATH: every place is named, PATH last.
  let got = extension.findServer("sexpgpu", [project], interpreters, env);
  assert.equal(got.found, onPath);
  assert.deepEqual(got.looked, [path.join(project, ".venv", "bin", "sexpgpu"), path.join(interpreterDir, "sexpgpu"), onPath]);

  // Beside the selected interpreter, before PATH.
  const besidePython = program(interpreterDir);
  got = extension.findServer("sexpgpu", [project], interpreters, env);
  assert.equal(got.found, besidePython);

  // The workspace's .venv first of all.
  const inVenv = program(path.join(project, ".venv", "bin"));
  got = extension.findServer("sexpgpu", [project], interpreters, env);
  assert.equal(got.found, inVenv);
  assert.deepEqual(got.looked, [inVenv]);

  // A path is taken as it is, relative to the workspace folder.
  got = extension.findServer(".venv/bin/sexpgpu", [project], interpreters, {});
  assert.equal(got.found, inVenv);
  got = extension.findServer("/nonexistent/sexpgpu", [project], interpreters, env);
  assert.deepEqual(got, { found: undefined, looked: ["/nonexistent/sexpgpu"] });
});

test("activation finds the server beside the Python extension's interpreter and says where it looked", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "sexpgpu-activate-"));
  const project = path.join(root, "project");
  fs.mkdirSync(project);
  const found = program(path.join(root, "env", "bin"));
  const { extension, calls } = loadExtension({}, { folders: [project], interpreter: path.join(root, "env", "bin", "python3") });
  const savedPath = process.env.PATH;
  process.env.PATH = "/nonexistent";
  try {
    await extension.activate({ subscriptions: [] });
  } finally {
    process.env.PATH = savedPath;
  }
  assert.ok(calls.lines.includes(`looked for the server: ${path.join(project, ".venv", "bin", "sexpgpu")}`), calls.lines);
  assert.ok(calls.lines.includes(`looked for the server: ${found} (found)`), calls.lines);
  assert.ok(calls.lines.includes(`starting ${found} lsp`), calls.lines);
  // (the stand-in API cannot run the client itself: only "failed to start" may follow)
  assert.ok(calls.errors.every((e) => /failed to start/.test(e.message)), calls.errors);
  await extension.deactivate();
});
