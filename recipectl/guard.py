"""How a recipectl process ends once a command has run: an expected failure (RecipectlError)
prints its message and fix and exits with its code (1 or 2), Ctrl-C exits 130, and a bug exits 3
with its traceback in a log file. Usage errors, help and a closed stdout pipe are Typer's (cli.py)."""

from __future__ import annotations

import faulthandler
import re
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from .errors import ExitCode, RecipectlError
from .secretscan import redact_text

# An internal error's message names the exception, not the data it was raised on (Python quotes the
# value in most: `invalid literal for int() with base 10: 'hunter2'`, `KeyError: 'HF_TOKEN'`): on the
# error line a quoted value is <value>, credential-shaped runs are <redacted> and the line is cut;
# the traceback, in the log file, is redacted.
_MESSAGE_LIMIT = 300
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")


def run_guarded(fn: Callable[[], Any]) -> None:
    """Run a command and exit: expected failures print a message and a fix; bugs exit 3 with a log file."""
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
    except Exception as e:  # last resort: a bug, not bad input
        with tempfile.NamedTemporaryFile("w", prefix="recipectl-crash-", suffix=".log", delete=False) as f:
            f.write(redact_text(traceback.format_exc()))  # a file users attach to bug reports
        sys.stderr.write(
            f"recipectl: internal error: {type(e).__name__}: {_internal_message(e)}\n"
            f"  traceback: {f.name}\n  this is a bug in recipectl; please report it with that file\n"
        )
        sys.exit(int(ExitCode.INTERNAL))


def _internal_message(e: BaseException) -> str:
    """An unexpected exception's message as the error line shows it: one line, credential-shaped
    runs redacted, quoted values left out, cut past _MESSAGE_LIMIT characters."""
    try:
        text = str(e)
    except Exception:  # a broken __str__ must not hide the error itself
        text = ""
    text = redact_text(_QUOTED.sub("<value>", " ".join(text.split())))
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "... (cut; the log file has it)"
