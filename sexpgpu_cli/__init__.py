"""The `sexpgpu` command line: thin shells over sexpgpu_lang and sexpgpu_runtime."""


def main() -> None:
    """The `sexpgpu` console script: `sexpgpu_cli.main.main`, its start-up kept from the cyclic GC.

    What the command imports (typer and the modules it loads) lives until the process exits, so
    collections while it loads free nothing and only walk it again and again (some 20, about 3 ms
    of a cold `sexpgpu lint`): the GC is off while `sexpgpu_cli.main` is imported, then what exists
    is frozen (`gc.freeze`: later collections skip it) and the GC is on again.
    """
    import sys
    if sys.argv[1:2] == ["run"]:   # a signal from the first moment on is noted (sexpgpu_cli.early_signals)
        from .early_signals import EarlySignals
        EarlySignals.install_first()
    import gc
    collecting = gc.isenabled()
    gc.disable()
    from .main import main as run
    gc.freeze()
    if collecting:
        gc.enable()
    if sys.argv[1:2] != ["run"]:
        run()
        return
    from .early_signals import EarlySignals
    try:
        run()
    except SystemExit as e:   # the status `EarlySignals.end_process` exits with, after atexit
        EarlySignals.status = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        raise
    except BaseException:
        EarlySignals.status = 1   # (the traceback is printed before atexit runs)
        raise
