// The manifest and the language configuration: the word pattern keeps
// SexpGPU's words whole, brackets and pairs are right, and `engines.vscode`
// is not older than the @types/vscode the client builds against (vsce refuses
// to package otherwise).
const assert = require("node:assert/strict");
const path = require("node:path");
const test = require("node:test");

const root = path.resolve(__dirname, "..");
const manifest = require(path.join(root, "package.json"));
const config = require(path.join(root, "language-configuration.json"));

function version(text) {
  return text.replace(/^[^\d]*/, "").split(".").map(Number);
}

test("engines.vscode is not older than @types/vscode", () => {
  const engine = version(manifest.engines.vscode);
  const types = version(manifest.devDependencies["@types/vscode"]);
  const installed = version(require(path.join(root, "node_modules", "@types", "vscode", "package.json")).version);
  for (const built of [types, installed]) {
    assert.ok(engine[0] > built[0] || (engine[0] === built[0] && engine[1] >= built[1]),
      `engines.vscode ${manifest.engines.vscode} is older than @types/vscode ${built.join(".")}`);
  }
});

test("the language, its file extension, grammar and configuration are contributed", () => {
  const [language] = manifest.contributes.languages;
  assert.equal(language.id, "sexpgpu");
  assert.deepEqual(language.extensions, [".sx"]);
  const [grammar] = manifest.contributes.grammars;
  assert.equal(grammar.language, "sexpgpu");
  assert.equal(grammar.scopeName, "source.sexpgpu");
  const settings = manifest.contributes.configuration.properties;
  assert.equal(settings["sexpgpu.server.command"].default, "sexpgpu");
  assert.deepEqual(settings["sexpgpu.server.args"].default, ["lsp"]);
});

test("the word pattern keeps hyphenated names, keywords and numbers whole", () => {
  const words = (text) => text.match(new RegExp(config.wordPattern, "g"));
  assert.deepEqual(words("(log-softmax x :axes [1] :keepdims true)"),
    ["log-softmax", "x", ":axes", "1", ":keepdims", "true"]);
  assert.deepEqual(words("(take-along-axis logits idx) ; 3e-4"), ["take-along-axis", "logits", "idx", "3e-4"]);
  assert.deepEqual(words("(let* ((a (<= x 2))) a)"), ["let*", "a", "<=", "x", "2", "a"]);
});

test("comments, brackets and auto-closing pairs", () => {
  assert.equal(config.comments.lineComment, ";");
  assert.deepEqual(config.brackets, [["(", ")"], ["[", "]"]]);
  const pairs = config.autoClosingPairs.map((p) => p.open + p.close);
  assert.deepEqual(pairs, ["()", "[]", '""']);
  const quote = config.autoClosingPairs.find((p) => p.open === '"');
  assert.deepEqual(quote.notIn, ["string", "comment"]);
});
