"""How a recipectl process ends: expected failures print a message and a fix (exit 1 or 2),
Ctrl-C exits 130, a closed stdout pipe exits quietly, and a bug exits 3 with its traceback in a
log file. Shared by the Typer app (cli.py) and the fast path (entry.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


def as_typer_would(fn: Callable[[], int]) -> int:
    """What Typer's main does around a command: Ctrl-C is a quiet exit 130, end of input an abort
    (a newline, then run_guarded's "interrupted" and 130), a closed stdout pipe a quiet exit 1."""
    import errno

    try:
        return fn()
    except KeyboardInterrupt:
        return 130
    except EOFError:
        sys.stderr.write("\n")
        raise KeyboardInterrupt from None  # run_guarded reports it as Typer's Abort is reported
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing more can reach the reader
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def run_guarded(fn: Callable[[], Any]) -> None:
    """Run a command and exit: expected failures print a message and a fix; bugs exit 3 with a log file."""
    import faulthandler
    import signal

    from .errors import ExitCode, RecipectlError

    # `kill -USR1 PID` prints every thread's stack to stderr: how to see where a hung command waits.
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, OSError):  # stderr without a file descriptor (captured)
        pass
    try:
        rc = fn()  # the exit code
        sys.exit(int(rc or 0))
    except RecipectlError as e:
        sys.stderr.write(f"recipectl: error: {e.message}\n")
        if e.fix:
            sys.stderr.write(f"  fix: {e.fix}\n")
        sys.exit(int(e.exit_code))
    except KeyboardInterrupt:
        sys.stderr.write("recipectl: interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except SystemExit:
        raise
    except Exception as e:  # noqa: BLE001 - last resort: a bug, not bad input
        # usage errors from the (vendored) click parser: print them as click would, exit 2
        if callable(getattr(e, "show", None)) and hasattr(e, "exit_code"):
            e.show()
            sys.exit(int(ExitCode.INVALID))
        if type(e).__name__ == "Abort":  # Ctrl-C inside a prompt
            sys.stderr.write("recipectl: interrupted\n")
            sys.exit(int(ExitCode.INTERRUPTED))
        import tempfile
        import traceback

        with tempfile.NamedTemporaryFile("w", prefix="recipectl-crash-", suffix=".log", delete=False) as f:
            traceback.print_exc(file=f)
        sys.stderr.write(f"recipectl: internal error: {type(e).__name__}: {e}\n  traceback: {f.name}\n"
                         "  this is a bug in recipectl; please report it with that file\n")
        sys.exit(int(ExitCode.INTERNAL))
