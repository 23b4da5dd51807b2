"""How a recipectl process ends: expected failures print a message and a fix (exit 1 or 2),
Ctrl-C exits 130, a closed stdout pipe exits quietly, and a bug exits 3 with its traceback in a
log file. Shared by the Typer app (cli.py) and the fast path (entry.py)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from .secretscan import redact_text

# An internal error's message names the exception, not the data it was raised on (Python quotes the
# value in most: `invalid literal for int() with base 10: 'hunter2'`, `KeyError: 'HF_TOKEN'`): on the
# error line a quoted value is <value>, credential-shaped runs are <redacted> and the line is cut;
# the traceback, in the log file, is redacted.
_MESSAGE_LIMIT = 300
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


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
        # an error may quote what it was given (a model path with a password in its URL)
        sys.stderr.write(f"recipectl: error: {redact_text(e.message)}\n")
        if e.fix:
            sys.stderr.write(f"  fix: {redact_text(e.fix)}\n")
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
            f.write(redact_text(traceback.format_exc()))  # a file users attach to bug reports
        sys.stderr.write(f"recipectl: internal error: {type(e).__name__}: {_internal_message(e)}\n"
                         f"  traceback: {f.name}\n  this is a bug in recipectl; please report it with that file\n")
        sys.exit(int(ExitCode.INTERNAL))


def _internal_message(e: BaseException) -> str:
    """An unexpected exception's message as the error line shows it: one line, credential-shaped
    runs redacted, quoted values left out, cut past _MESSAGE_LIMIT characters."""
    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error itself
        text = ""
    text = redact_text(_QUOTED.sub("<value>", " ".join(text.split())))
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "... (cut; the log file has it)"
