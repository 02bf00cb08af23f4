;;; driver.el --- drive eglot against `sexpgpu lsp' for tests/test_emacs.py  -*- lexical-binding: t -*-
;;
;; Run after the documented set-up (init.el):
;;   emacs --batch -l tests/emacs/init.el -l tests/emacs/driver.el
;; with SEXPGPU_EMACS_CONFIG naming a JSON file: {file, out, timeout_s, hover, fix,
;; complete, messy: {old, new}} (positions as {line, character}, 0-based). It opens the
;; file as a user would (the mode from auto-mode-alist starts eglot), then records what
;; Emacs itself shows: flymake's diagnostics, eldoc's hover text, the buffer after the
;; quick fix (`eglot-code-actions' of kind quickfix), after a completion
;; (`completion-at-point') and after `eglot-format-buffer'. Writes the record as JSON to
;; `out' (with `error' when a step failed) and exits.

(require 'json)
(require 'flymake)

(defvar sx-config
  (json-parse-string (with-temp-buffer
                       (insert-file-contents (getenv "SEXPGPU_EMACS_CONFIG"))
                       (buffer-string))
                     :object-type 'plist))
(defvar sx-result nil)

(defun sx-put (key value) (setq sx-result (plist-put sx-result key value)))

(defun sx-idle ()
  "Run the idle timers, as Emacs does when the user pauses (batch Emacs is never idle):
eglot sends a buffer's changes from one."
  (dolist (timer (copy-sequence timer-idle-list))
    (timer-event-handler timer)))

(defun sx-wait (pred what)
  "Wait for PRED, letting processes and timers run; fail naming WHAT after the timeout."
  (let ((deadline (+ (float-time) (plist-get sx-config :timeout_s))))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (sx-idle)
      (accept-process-output nil 0.05))
    (or (funcall pred) (error "timed out waiting for %s" what))))

(defun sx-goto (pos)
  (goto-char (point-min))
  (forward-line (plist-get pos :line))
  (forward-char (plist-get pos :character)))

(defun sx-diagnostics ()
  (vconcat (mapcar (lambda (d)
                     (let ((beg (flymake-diagnostic-beg d)))
                       (list :line (1- (line-number-at-pos beg))
                             :column (save-excursion (goto-char beg) (current-column))
                             :type (symbol-name (flymake-diagnostic-type d))
                             :text (flymake-diagnostic-text d))))
                   (sort (flymake-diagnostics) (lambda (a b) (< (flymake-diagnostic-beg a)
                                                                (flymake-diagnostic-beg b)))))))

(defun sx-line () (buffer-substring-no-properties (line-beginning-position) (line-end-position)))

(defun sx-write ()
  (with-temp-file (plist-get sx-config :out)
    (insert (json-serialize sx-result))))

(condition-case err
    (progn
      (find-file (plist-get sx-config :file))
      (switch-to-buffer (current-buffer))
      (sx-put :mode (symbol-name major-mode))
      ;; `eglot-ensure' connects after the command that opened the file.
      (run-hooks 'post-command-hook)
      (sx-wait (lambda () (bound-and-true-p eglot--managed-mode)) "eglot to manage the buffer")
      (flymake-start nil t)
      (sx-wait (lambda () (flymake-diagnostics)) "diagnostics")
      (sx-put :diagnostics (sx-diagnostics))

      ;; Hover, as eldoc asks for it.
      (sx-goto (plist-get sx-config :hover))
      (let ((got nil))
        (eglot-hover-eldoc-function (lambda (info &rest _) (setq got (or info ""))))
        (sx-wait (lambda () got) "hover")
        (sx-put :hover (substring-no-properties got)))

      ;; What eldoc itself shows at the hover position (the documented strategy, with
      ;; every documentation function eglot installs): the last display it asks for.
      (sx-goto (plist-get sx-config :hover))
      (let ((shown nil))
        (setq-local eldoc-display-functions
                    (list (lambda (docs &rest _) (setq shown (or docs :none)))))
        (eldoc-print-current-symbol-info t)
        (sx-wait (lambda () shown) "eldoc's display")
        (let ((deadline (+ (float-time) 1.0)))  ; a later, fuller display may follow
          (while (< (float-time) deadline) (accept-process-output nil 0.05)))
        (sx-put :eldoc_strategy (symbol-name eldoc-documentation-strategy))
        (sx-put :eldoc (vconcat (mapcar (lambda (d) (substring-no-properties (car d)))
                                        (if (eq shown :none) nil shown)))))

      ;; The quick fix at the diagnostic; the diagnostics follow.
      (sx-goto (plist-get sx-config :fix))
      (eglot-code-actions (point) (point) "quickfix" t)
      (sx-put :fixed_line (sx-line))
      (sx-wait (lambda () (null (flymake-diagnostics))) "no diagnostics after the quick fix")

      ;; Completion replaces the word being typed, colon and dashes included.
      (sx-goto (plist-get sx-config :complete))
      (delete-char (length (plist-get sx-config :complete_deleted)))
      (completion-at-point)
      (sx-put :completed_line (sx-line))

      ;; Formatting a messy line.
      (goto-char (point-min))
      (search-forward (plist-get (plist-get sx-config :messy) :old))
      (replace-match (plist-get (plist-get sx-config :messy) :new) t t)
      (sx-put :before_format (buffer-substring-no-properties (point-min) (point-max)))
      (eglot-format-buffer)
      (sx-put :formatted (buffer-substring-no-properties (point-min) (point-max)))
      (sx-wait (lambda () (null (flymake-diagnostics))) "no diagnostics after formatting")
      (set-buffer-modified-p nil)
      (eglot-shutdown (eglot-current-server))
      (sx-put :shutdown t))
  (error (sx-put :error (error-message-string err))))
(sx-write)
(kill-emacs 0)
