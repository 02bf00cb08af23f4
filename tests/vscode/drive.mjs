// Drive VS Code (code-server in Debian's chromium, through puppeteer-core) on one
// run file, as a user would, and write what VS Code showed as JSON.
//
//   node drive.mjs CONFIG.json
//
// CONFIG: {url, file (its base name, opened with Quick Open), out, chromium,
// timeout_ms, line, column (1-based, the diagnostic to hover and fix)}. Steps: open the
// file; open the Problems panel and read its rows (the diagnostic, its related places,
// its help); read the inlay hints of the editor; hover at line:column; apply the
// preferred quick fix there (Ctrl+.); wait until the Problems panel is empty. Each step
// records what it saw; a step that fails records `error` and a screenshot beside `out`.
import fs from "node:fs";
import puppeteer from "puppeteer-core";

const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const result = { steps: [] };
const write = () => fs.writeFileSync(config.out, JSON.stringify(result, null, 1));

async function until(page, what, fn, ...args) {
  try {
    return await page.waitForFunction(fn, { timeout: config.timeout_ms, polling: 100 }, ...args);
  } catch (err) {
    throw new Error(`timed out waiting for ${what}: ${err.message}`);
  }
}

async function command(page, name) {
  // The command palette: F1, the command's title, Enter.
  await page.keyboard.press("F1");
  await until(page, "the command palette", () => document.querySelector(".quick-input-widget:not([style*='display: none']) input"));
  await page.keyboard.type(name);
  await new Promise((r) => setTimeout(r, 400));
  await page.keyboard.press("Enter");
}

const browser = await puppeteer.launch({
  executablePath: config.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--window-size=1600,1000"],
  defaultViewport: { width: 1600, height: 1000 },
});
const page = await browser.newPage();
try {
  await page.goto(config.url, { waitUntil: "domcontentloaded", timeout: config.timeout_ms });
  await until(page, "the workbench", () => document.querySelector(".monaco-workbench .part.editor"));
  result.steps.push("workbench");

  // Open the file with Quick Open (Ctrl+P).
  await page.keyboard.down("Control");
  await page.keyboard.press("p");
  await page.keyboard.up("Control");
  await until(page, "quick open", () => document.querySelector(".quick-input-widget input"));
  await page.keyboard.type(config.file);
  await until(page, "the file in quick open", (name) =>
    [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(name)), config.file);
  await page.keyboard.press("Enter");
  await until(page, "the editor", (name) =>
    document.querySelector(`.tab.active[aria-label*="${name}"]`) && document.querySelector(".monaco-editor .view-lines"), config.file);
  result.language = await page.evaluate(() => document.querySelector(".statusbar [aria-label*='SexpGPU'], #status\\.editor\\.mode")?.textContent ?? "");
  result.steps.push("opened");

  // The Problems panel: the diagnostic, expanded with its related information.
  await command(page, "View: Focus Problems");
  await until(page, "a problem", () =>
    [...document.querySelectorAll(".markers-panel .monaco-list-row")].some((r) => r.textContent.includes("E-GEN-002")));
  await new Promise((r) => setTimeout(r, 500));
  result.problems = await page.evaluate(() =>
    [...document.querySelectorAll(".markers-panel .monaco-list-row")].map((r) => r.innerText.trim().replace(/\u00a0/g, " ")));
  if (config.debug) {
    await page.screenshot({ path: config.out.replace(/\.json$/, "-problems.png") });
    result.debug_rows = await page.evaluate(() =>
      [...document.querySelectorAll(".markers-panel .monaco-list-row")].map((r) => r.outerHTML.slice(0, 3000)));
    result.debug_spans = await page.evaluate(() =>
      [...document.querySelectorAll(".monaco-editor .view-lines span")].slice(0, 400).map((s) => s.className + "|" + s.textContent).filter((t) => /\[/.test(t)).slice(0, 40));
    result.debug_css = await page.evaluate(() => [...document.styleSheets].flatMap((sh) => { try { return [...sh.cssRules].map((r) => r.cssText).filter((t) => /content:/.test(t) && /\[/.test(t)); } catch { return []; } }).slice(0, 20));
  }
  result.steps.push("problems");

  // Inlay hints: the types after names, as the editor renders them.
  await until(page, "inlay hints", () => document.querySelector(".monaco-editor .view-lines [class*='dyn-rule'], .monaco-editor .view-lines .inlay-hint, .monaco-editor .view-lines span[class*='inlay']"));
  result.inlay = await page.evaluate(() =>
    [...document.querySelectorAll(".monaco-editor .view-lines span")].map((s) => s.textContent.replace(/\u00a0/g, " "))
      .filter((t) => /^: \[/.test(t)).slice(0, 20));
  result.steps.push("inlay");

  // Go to the diagnostic (Ctrl+G line:column), show the hover (Ctrl+K Ctrl+I).
  await page.click(".monaco-editor .view-lines");
  await page.keyboard.down("Control");
  await page.keyboard.press("g");
  await page.keyboard.up("Control");
  await until(page, "go to line", () => document.querySelector(".quick-input-widget input"));
  await page.keyboard.type(`${config.line}:${config.column}`);
  await page.keyboard.press("Enter");
  await new Promise((r) => setTimeout(r, 300));
  await command(page, "Show or Focus Hover");
  await until(page, "the hover", () => document.querySelector(".monaco-hover .hover-contents, .monaco-hover .rendered-markdown"));
  await new Promise((r) => setTimeout(r, 500));
  result.hover = await page.evaluate(() => document.querySelector(".monaco-hover")?.innerText ?? "");
  result.steps.push("hover");
  await page.keyboard.press("Escape");

  // The quick fix (Ctrl+.), then the problem goes.
  await page.keyboard.down("Control");
  await page.keyboard.press(".");
  await page.keyboard.up("Control");
  await until(page, "the quick fix menu", () => document.querySelector(".action-widget .monaco-list-row, .context-view .action-label"));
  result.fixes = await page.evaluate(() =>
    [...document.querySelectorAll(".action-widget .monaco-list-row, .context-view .action-label")].map((r) => r.textContent.trim()));
  await page.keyboard.press("Enter");
  await until(page, "the problem to go", () =>
    ![...document.querySelectorAll(".markers-panel .monaco-list-row")].some((r) => r.textContent.includes("E-GEN-002")));
  result.fixed_line = await page.evaluate((n) => {
    const lines = [...document.querySelectorAll(".monaco-editor .view-line")];
    // the line's own text: without the inlay hints (injected text, `dyn-rule` spans)
    const text = (l) => {
      const copy = l.cloneNode(true);
      copy.querySelectorAll("[class*='dyn-rule']").forEach((s) => s.remove());
      return copy.textContent.replace(/\u00a0/g, " ");
    };
    return lines.map(text).find((t) => t.includes("guess row")) ?? "";
  }, config.line);
  result.steps.push("fixed");
} catch (err) {
  result.error = String(err && err.stack || err);
  try {
    await page.screenshot({ path: config.out.replace(/\.json$/, ".png") });
  } catch {}
} finally {
  write();
  await browser.close();
}
