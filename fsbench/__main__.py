"""`python -m fsbench ...` (and the `fsbench` console script) runs the fsbench CLI. Ctrl-C is handled before the
CLI's imports, which take seconds, so that no press, however early, ends in a traceback; an interrupted command
leaves before the interpreter's teardown, where a second press would end it by the signal instead of exit code 130."""
import logging
import os
import signal
import sys


def _leave(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    _release_pools()
    os._exit(code)


def _release_pools() -> None:
    """End a worker pool that the interrupt left behind and unlink its semaphores, as the teardown that `_leave`
    skips would: else multiprocessing's resource tracker prints a warning of leaked semaphores after our one line.
    multiprocessing has no public call for its exit finalizers (the teardown runs them as `util._exit_function`)."""
    if "multiprocessing" not in sys.modules:
        return
    import multiprocessing
    from multiprocessing import util

    for child in multiprocessing.active_children():
        child.terminate()
    util._run_finalizers(0)  # type: ignore[attr-defined]


def main() -> None:
    try:
        from fsbench.harness.run import interrupts
    except KeyboardInterrupt:
        print("fsbench: interrupted before it began: nothing was written", file=sys.stderr, flush=True)
        _leave(130)
    interrupts.install()
    try:
        from fsbench.harness.cli import main as cli

        cli(prog_name="fsbench")
    except KeyboardInterrupt:  # in the CLI's imports
        print(f"fsbench: {interrupts.message()}", file=sys.stderr, flush=True)
        _leave(interrupts.INTERRUPTED)
    except Exception:  # a press inside an extension's import surfaces as its own error: still one line, 130
        if not interrupts.was_pressed():
            raise
        print(f"fsbench: {interrupts.message()}", file=sys.stderr, flush=True)
        _leave(interrupts.INTERRUPTED)
    except SystemExit as exc:
        if exc.code == interrupts.INTERRUPTED:
            _leave(interrupts.INTERRUPTED)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command has ended: a press in the teardown changes nothing
        raise


if __name__ == "__main__":
    main()
