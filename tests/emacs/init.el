;; SexpGPU run files in Emacs 28 and later with eglot (Debian's elpa-eglot, or
;; built in from Emacs 29): *.sx files get `sexpgpu-mode', and eglot starts
;; `sexpgpu lsp' for them.
(require 'eglot)
(define-derived-mode sexpgpu-mode lisp-data-mode "SexpGPU"
  "Major mode for SexpGPU run files."
  (setq-local comment-start ";"))
(add-to-list 'auto-mode-alist '("\\.sx\\'" . sexpgpu-mode))
(add-to-list 'eglot-server-programs '(sexpgpu-mode . ("sexpgpu" "lsp")))  ; or the full path to .venv/bin/sexpgpu
(add-hook 'sexpgpu-mode-hook #'eglot-ensure)
;; eldoc shows the signature of the call around point and the hover of what is at
;; point together (eglot's own strategy shows only the signature inside a call).
(add-hook 'eglot-managed-mode-hook
          (lambda ()
            (when (derived-mode-p 'sexpgpu-mode)
              (setq-local eldoc-documentation-strategy #'eldoc-documentation-compose))))
