-- Neovim (0.7 and later) as an independent LSP client of `sexpgpu lsp`.
--
-- Driven by tests/test_neovim.py:
--   nvim --headless -u NONE -i NONE -n -c 'luafile tests/nvim/lsp_client.lua'
-- with SEXPGPU_NVIM_CONFIG naming a JSON file:
--   { "file": "/abs/case.sx", "root": "/abs/repo", "cmd": ["sexpgpu", "lsp"],
--     "out": "/abs/result.json", "timeout_ms": 20000,
--     "hovers": [{"line": 33, "character": 20}, ...],          -- 0-based, ASCII lines
--     "edit": {"line": 39, "start": 60, "finish": 64, "text": ":i32"} }  -- optional
--
-- It opens the file, starts the server with `vim.lsp.start_client` and
-- attaches it with `vim.lsp.buf_attach_client` (0.7 has no `vim.lsp.start`),
-- waits for the first diagnostics, asks for a hover at each position, applies
-- the edit (Neovim sends the didChange) and waits for the diagnostics of the
-- new version, then stops the server. Everything it saw, read back from
-- Neovim itself (`vim.diagnostic.get`, the hover lines Neovim would show), is
-- written as JSON to `out`; one summary line goes to stdout.
-- Any Lua error is written to `out` as `error` and Neovim exits with 2.

local result = { publishes = {}, log = {} }
local cfg

local function note(msg)
  table.insert(result.log, string.format("%.3f %s", vim.loop.hrtime() / 1e9, msg))
end

local function write_result()
  local fh = assert(io.open(cfg.out, "w"))
  fh:write(vim.json.encode(result))
  fh:close()
end

-- Neovim's own view of the buffer's diagnostics, in plain data.
local function read_diagnostics(bufnr)
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    local lsp = (d.user_data or {}).lsp or {}
    table.insert(out, {
      lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
      severity = d.severity, message = d.message, source = d.source,
      code = d.code or lsp.code,
      codeDescription = lsp.codeDescription,
      relatedInformation = lsp.relatedInformation,
    })
  end
  table.sort(out, function(a, b)
    if a.lnum ~= b.lnum then return a.lnum < b.lnum end
    return a.col < b.col
  end)
  return out
end

local function wait_for(what, predicate)
  local ok = vim.wait(cfg.timeout_ms, predicate, 20)
  if not ok then
    error(string.format("timed out after %d ms waiting for %s", cfg.timeout_ms, what))
  end
end

local function hover_at(bufnr, client_id, pos)
  vim.api.nvim_win_set_cursor(0, { pos.line + 1, pos.character })
  local client = vim.lsp.get_client_by_id(client_id)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local responses, err = vim.lsp.buf_request_sync(bufnr, "textDocument/hover", params, cfg.timeout_ms)
  local entry = { line = pos.line, character = pos.character, params = params }
  if not responses then
    entry.error = "no response: " .. tostring(err)
    return entry
  end
  local response = responses[client_id] or {}
  entry.error = response.err and vim.inspect(response.err) or nil
  local hover = response.result
  if hover == nil or hover == vim.NIL then
    entry.lines = {}
    return entry
  end
  entry.range = hover.range
  -- What Neovim's hover float would show.
  local lines = vim.lsp.util.convert_input_to_markdown_lines(hover.contents)
  entry.lines = vim.lsp.util.trim_empty_lines(lines)
  return entry
end

local function main()
  local config_path = assert(os.getenv("SEXPGPU_NVIM_CONFIG"), "SEXPGPU_NVIM_CONFIG is not set")
  local fh = assert(io.open(config_path, "r"))
  cfg = vim.json.decode(fh:read("*a"))
  fh:close()
  cfg.timeout_ms = cfg.timeout_ms or 20000
  result.nvim_version = tostring(vim.version().major) .. "." .. tostring(vim.version().minor)
    .. "." .. tostring(vim.version().patch)

  vim.cmd("edit " .. vim.fn.fnameescape(cfg.file))
  local bufnr = vim.api.nvim_get_current_buf()
  vim.bo[bufnr].filetype = "sexpgpu"

  local default_publish = vim.lsp.handlers["textDocument/publishDiagnostics"]
  local exited = false
  local client_id = vim.lsp.start_client({
    name = "sexpgpu",
    cmd = cfg.cmd,
    root_dir = cfg.root,
    handlers = {
      ["textDocument/publishDiagnostics"] = function(err, params, ctx, config)
        default_publish(err, params, ctx, config)
        local codes = {}
        for _, d in ipairs(params.diagnostics or {}) do
          table.insert(codes, tostring(d.code) .. "@" .. tostring(d.range.start.line))
        end
        table.insert(result.publishes, {
          uri = params.uri,
          version = params.version,
          count = #(params.diagnostics or {}),
          codes = codes,
        })
        note("publishDiagnostics version=" .. tostring(params.version) .. " " .. table.concat(codes, ","))
      end,
    },
    on_exit = function(code, signal)
      exited = true
      result.exit = { code = code, signal = signal }
    end,
  })
  if not client_id then
    error("vim.lsp.start_client returned nil for cmd " .. vim.inspect(cfg.cmd))
  end
  result.attached = vim.lsp.buf_attach_client(bufnr, client_id)
  note("attached " .. tostring(result.attached))

  wait_for("the server to initialize", function()
    local client = vim.lsp.get_client_by_id(client_id)
    return exited or (client ~= nil and client.initialized)
  end)
  if exited then
    error("the server exited during start-up: " .. vim.inspect(result.exit))
  end
  local client = vim.lsp.get_client_by_id(client_id)
  result.server_capabilities = client.server_capabilities
  result.offset_encoding = client.offset_encoding

  wait_for("the first diagnostics", function() return #result.publishes > 0 or exited end)
  result.opened = { diagnostics = read_diagnostics(bufnr), version = vim.lsp.util.buf_versions[bufnr] }

  result.hovers = {}
  for _, pos in ipairs(cfg.hovers or {}) do
    table.insert(result.hovers, hover_at(bufnr, client_id, pos))
  end

  if cfg.edit then
    local before = #result.publishes
    local e = cfg.edit
    vim.api.nvim_buf_set_text(bufnr, e.line, e.start, e.line, e.finish, { e.text })
    local version = vim.lsp.util.buf_versions[bufnr]
    note("edited, buffer version " .. tostring(version))
    -- Diagnostics for the edited text: a publish that names this version, or,
    -- from a server that sends no version, the first publish after the edit.
    wait_for("diagnostics after the edit", function()
      for i = before + 1, #result.publishes do
        local v = result.publishes[i].version
        if v == nil or v == vim.NIL or v == version then
          return true
        end
      end
      return exited
    end)
    -- Let any late publish for an older version arrive, so the test can see it.
    vim.wait(300, function() return false end, 20)
    result.edited = {
      diagnostics = read_diagnostics(bufnr),
      version = version,
      line = vim.api.nvim_buf_get_lines(bufnr, e.line, e.line + 1, false)[1],
    }
  end

  vim.lsp.stop_client(client_id)
  wait_for("the server to exit", function() return exited end)
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  result.error = tostring(err)
end
if cfg and cfg.out then
  local wrote, werr = pcall(write_result)
  if not wrote then
    io.stdout:write("sexpgpu-nvim: cannot write result: " .. tostring(werr) .. "\n")
  end
end
io.stdout:write(string.format("sexpgpu-nvim: %s, %d publishes\n", ok and "done" or ("error: " .. tostring(err)),
  #result.publishes))
if ok then
  vim.cmd("qall!")
else
  vim.cmd("cquit 2")
end
