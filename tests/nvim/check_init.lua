-- Run after `nvim -u tests/nvim/init.lua FILE.sx` (the setup docs/editors-setup.md
-- gives): waits for the diagnostics of the current buffer and writes, as JSON to
-- $SEXPGPU_NVIM_OUT, the filetype, the attached clients and the diagnostics.
local out = { filetype = vim.bo.filetype, clients = {}, diagnostics = {} }
local ok = vim.wait(30000, function() return #vim.diagnostic.get(0) > 0 end, 20)
out.waited = ok
for _, client in pairs(vim.lsp.buf_get_clients(0)) do
  table.insert(out.clients, client.name)
end
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(out.diagnostics, { code = d.code, lnum = d.lnum, severity = d.severity })
end
local fh = assert(io.open(assert(os.getenv("SEXPGPU_NVIM_OUT")), "w"))
fh:write(vim.json.encode(out))
fh:close()
for _, client in pairs(vim.lsp.get_active_clients()) do
  client.stop()
end
vim.wait(5000, function() return #vim.lsp.get_active_clients() == 0 end, 20)
vim.cmd("qall!")
