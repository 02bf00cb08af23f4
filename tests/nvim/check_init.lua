-- Run after `nvim -u tests/nvim/init.lua FILE.sx` (the setup docs/editors-setup.md
-- gives): waits for the diagnostics of the current buffer and writes, as JSON to
-- $SEXPGPU_NVIM_OUT, the filetype, the attached clients, the diagnostics and where
-- completion would start.
local out = { filetype = vim.bo.filetype, clients = {}, diagnostics = {} }
local ok = vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 20)
out.waited = ok
for _, client in pairs(vim.lsp.buf_get_clients(0)) do
  table.insert(out.clients, client.name)
end
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(out.diagnostics, { code = d.code, lnum = d.lnum, severity = d.severity })
end
-- Where completion starts with `:str` of `:stride` and `cross-entr` of `cross-entropy`
-- typed: `vim.lsp.omnifunc` (0.7 to 0.11) completes from `match(line_to_cursor, '\k*$')`,
-- the last run of 'iskeyword' characters before the cursor.
out.completion_starts = {}
for _, word in ipairs({ ":stride", "cross-entropy" }) do
  for _, line in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
    local col = string.find(line, word, 1, true)
    if col then
      local line_to_cursor = line:sub(1, col - 1 + #word - 3)
      table.insert(out.completion_starts, { word = word, expected = col - 1,
                                            got = vim.fn.match(line_to_cursor, "\\k*$") })
      break
    end
  end
end
local fh = assert(io.open(assert(os.getenv("SEXPGPU_NVIM_OUT")), "w"))
fh:write(vim.json.encode(out))
fh:close()
for _, client in pairs(vim.lsp.get_active_clients()) do
  client.stop()
end
vim.wait(5000, function() return #vim.lsp.get_active_clients() == 0 end, 20)
vim.cmd("qall!")
