-- SexpGPU run files in Neovim 0.7 and later: *.sx files get the filetype
-- `sexpgpu`, and every such buffer is attached to one `sexpgpu lsp` server.
vim.cmd([[autocmd BufRead,BufNewFile *.sx setfiletype sexpgpu]])

local sexpgpu_client = nil
vim.api.nvim_create_autocmd("FileType", {
  pattern = "sexpgpu",
  callback = function(args)
    vim.bo[args.buf].commentstring = "; %s"
    -- `:row` and `cross-entropy` are one word each, so completion replaces them whole
    vim.bo[args.buf].iskeyword = "@,48-57,_,192-255,-,:,+,*,/,<,=,>,!,?,%"
    if sexpgpu_client == nil or vim.lsp.client_is_stopped(sexpgpu_client) then
      sexpgpu_client = vim.lsp.start_client({
        name = "sexpgpu",
        cmd = { "sexpgpu", "lsp" },  -- or the full path, e.g. "/path/to/project/.venv/bin/sexpgpu"
        root_dir = vim.fn.getcwd(),
      })
    end
    if sexpgpu_client ~= nil then
      vim.lsp.buf_attach_client(args.buf, sexpgpu_client)
    end
  end,
})
