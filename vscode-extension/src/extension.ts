// The VS Code client for SexpGPU run files: starts `sexpgpu lsp` over stdio
// and hands it every `sexpgpu` document. All language knowledge lives in the
// server; this file only finds the program, starts it, and restarts it when
// its settings change.

import * as fs from "fs";
import * as os from "os";
import * as path from "path";
import * as vscode from "vscode";
import {
  Executable,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from "vscode-languageclient/node";

const COMMAND_SETTING = "sexpgpu.server.command";
const ARGS_SETTING = "sexpgpu.server.args";

let client: LanguageClient | undefined;
let output: vscode.OutputChannel | undefined;

/** The server program as configured: command and arguments, variables expanded. */
interface ServerSettings {
  command: string;
  args: string[];
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("SexpGPU Language Server");
  context.subscriptions.push(output);
  context.subscriptions.push(
    vscode.commands.registerCommand("sexpgpu.restartServer", () => restart()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration("sexpgpu.server")) {
        void restart();
      }
    }),
  );
  await start();
}

export async function deactivate(): Promise<void> {
  await stop();
}

async function restart(): Promise<void> {
  await stop();
  await start();
}

async function stop(): Promise<void> {
  const running = client;
  client = undefined;
  if (running) {
    try {
      await running.stop();
    } catch (err) {
      output?.appendLine(`stopping the server failed: ${String(err)}`);
    }
  }
}

async function start(): Promise<void> {
  const settings = readSettings();
  const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  const search = findServer(settings.command, folders, await pythonInterpreters());
  const resolved = search.found;
  for (const place of search.looked) {
    output?.appendLine(`looked for the server: ${place}${place === resolved ? " (found)" : ""}`);
  }
  if (!resolved) {
    void reportMissing(settings.command, search.looked);
    return;
  }
  const executable: Executable = {
    command: resolved,
    args: settings.args,
    options: { cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath },
  };
  const serverOptions: ServerOptions = { run: executable, debug: executable };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "sexpgpu" },
      { scheme: "untitled", language: "sexpgpu" },
    ],
    outputChannel: output,
  };
  output?.appendLine(`starting ${resolved} ${settings.args.join(" ")}`);
  try {
    client = new LanguageClient("sexpgpu", "SexpGPU Language Server", serverOptions, clientOptions);
    await client.start();
  } catch (err) {
    client = undefined;
    void vscode.window.showErrorMessage(
      `SexpGPU: the language server \`${resolved} ${settings.args.join(" ")}\` failed to start: ${String(err)}. ` +
        `Check \`${COMMAND_SETTING}\` and \`${ARGS_SETTING}\`, and the "SexpGPU Language Server" output.`,
    );
  }
}

function readSettings(): ServerSettings {
  const config = vscode.workspace.getConfiguration();
  const command = expand(config.get<string>(COMMAND_SETTING, "sexpgpu").trim() || "sexpgpu");
  const args = config.get<string[]>(ARGS_SETTING, ["lsp"]).map(expand);
  return { command, args };
}

/** Expand `~` and `${workspaceFolder}` so a project's `.venv` can be named in settings. */
function expand(value: string): string {
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? "";
  let out = value.replace(/\$\{workspaceFolder\}/g, folder);
  if (out === "~" || out.startsWith("~/")) {
    out = path.join(os.homedir(), out.slice(1));
  }
  return out;
}

/** Where `findServer` looked, in order, and what it found (undefined: nothing). */
export interface ServerSearch {
  found: string | undefined;
  looked: string[];
}

/**
 * The server program, found as users of ruff's extension expect: a `command`
 * that is a path is taken as it is (relative to the first workspace folder);
 * a bare name (the default `sexpgpu`) is looked for first in each workspace
 * folder's `.venv` (`bin/`, or `Scripts\` on Windows), then beside each of
 * the Python extension's selected interpreters, then on PATH. VS Code's
 * extension host takes PATH from the user's login shell, which need not hold
 * the project's virtual environment. `looked` names every place tried.
 */
export function findServer(command: string, folders: string[], interpreters: string[],
                           env: NodeJS.ProcessEnv = process.env): ServerSearch {
  const looked: string[] = [];
  const isWindows = process.platform === "win32";
  if (command.includes("/") || (isWindows && command.includes("\\"))) {
    const base = path.resolve(folders[0] ?? process.cwd(), command);
    looked.push(base);
    return { found: findExecutable(base, env), looked };
  }
  const dirs = [
    ...folders.map((f) => path.join(f, ".venv", isWindows ? "Scripts" : "bin")),
    ...interpreters.map((python) => path.dirname(python)),
  ];
  for (const dir of dirs) {
    const candidate = path.join(dir, command);
    if (looked.includes(candidate)) {
      continue;
    }
    looked.push(candidate);
    const found = findExecutable(candidate, env);
    if (found) {
      return { found, looked };
    }
  }
  const onPath = findExecutable(command, env);
  looked.push(onPath ?? `${command} on PATH (${env.PATH ?? ""})`);
  return { found: onPath, looked };
}

/** The Python extension's (ms-python.python) selected interpreter for each workspace folder, if it is installed. */
async function pythonInterpreters(): Promise<string[]> {
  const python = vscode.extensions.getExtension("ms-python.python");
  if (!python) {
    return [];
  }
  try {
    const api = python.isActive ? python.exports : await python.activate();
    const out: string[] = [];
    const resources = vscode.workspace.workspaceFolders?.map((f) => f.uri) ?? [undefined];
    for (const resource of resources) {
      const env = api?.environments?.getActiveEnvironmentPath?.(resource);
      const exec = env?.path ?? api?.settings?.getExecutionDetails?.(resource)?.execCommand?.[0];
      if (typeof exec === "string" && exec && !out.includes(exec)) {
        out.push(exec);
      }
    }
    return out;
  } catch (err) {
    output?.appendLine(`the Python extension gave no interpreter: ${String(err)}`);
    return [];
  }
}

/** The absolute path of `command` (a path, or a name looked up on PATH), or undefined. */
export function findExecutable(command: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const isWindows = process.platform === "win32";
  const extensions = isWindows ? (env.PATHEXT ?? ".EXE;.CMD;.BAT;.COM").split(";").concat([""]) : [""];
  const candidates = (base: string) => extensions.map((ext) => base + ext);
  if (command.includes("/") || (isWindows && command.includes("\\"))) {
    const base = path.resolve(vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? process.cwd(), command);
    return candidates(base).find(isExecutableFile);
  }
  for (const dir of (env.PATH ?? "").split(path.delimiter)) {
    if (!dir) {
      continue;
    }
    const found = candidates(path.join(dir, command)).find(isExecutableFile);
    if (found) {
      return found;
    }
  }
  return undefined;
}

function isExecutableFile(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) {
      return false;
    }
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

async function reportMissing(command: string, looked: string[]): Promise<void> {
  const message =
    `SexpGPU: cannot start the language server: the command \`${command}\` was not found ` +
    `(setting \`${COMMAND_SETTING}\`); looked in: ${looked.join("; ")}. ` +
    `Install the sexpgpu Python package (for example ` +
    `\`pip install -e .\` in a checkout of the project, into a virtual environment), then set ` +
    `\`${COMMAND_SETTING}\` to its program, e.g. \`\${workspaceFolder}/.venv/bin/sexpgpu\`, ` +
    `or put it on PATH. Highlighting still works without it.`;
  output?.appendLine(message);
  const choice = await vscode.window.showErrorMessage(message, "Open Settings", "Retry");
  if (choice === "Open Settings") {
    await vscode.commands.executeCommand("workbench.action.openSettings", COMMAND_SETTING);
  } else if (choice === "Retry") {
    await restart();
  }
}
