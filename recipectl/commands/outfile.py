"""The recipe files commands write at the user's request (`import -o`, `plan --write-recipe`):
which names they refuse, and the one atomic write with its error."""

from __future__ import annotations

import os
import stat
import sys

from ..errors import RecipectlError
from ..fileio import same_file_as, write_atomic


def check_out(out: str, inputs: list[str], *, force: bool, flag: str = "-o", read_as: str = "being imported") -> None:
    """Refuse an OUT that is not a new file the user named: an existing file without --force, a
    symlink (writing would replace the link, never its target: either is a surprise), a directory,
    or a file the command reads (one inode under any name: the original would be lost), or anything
    else that is not a regular file (a FIFO, a socket, a device: `--force` would replace
    `/dev/null` itself with the recipe). `flag` names the option that gave OUT, `read_as` what the
    command does with its input (the messages say both)."""
    if not out:
        raise RecipectlError(f"{flag} is empty; nothing was written", fix=f"{flag} names the recipe file to write")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as e:
        raise RecipectlError(
            f"{out}: cannot write the recipe: {(e.strerror or type(e).__name__).lower()}",
            fix=f"{flag} names a file in a directory that exists and you can write to",
        ) from None
    if stat.S_ISLNK(st.st_mode):
        raise RecipectlError(
            f"{out} is a symbolic link; nothing was written",
            fix=f"name the file itself with {flag} (or remove the link); --force never writes through or over a link",
        )
    if stat.S_ISDIR(st.st_mode):
        raise RecipectlError(f"{out} is a directory; nothing was written", fix=f"{flag} names the recipe file to write")
    if not stat.S_ISREG(st.st_mode):
        raise RecipectlError(
            f"{out} is not a regular file (a FIFO, socket or device); nothing was written",
            fix=f"{flag} names the recipe file to write"
            + ("; without -o the recipe goes to standard output" if flag == "-o" else ""),
        )
    read = same_file_as(out, inputs)
    if read is not None:
        raise RecipectlError(
            f"{out} is {read}, the file {read_as}; nothing was written",
            fix=f"write the recipe to another file, e.g. {flag} recipe.yaml",
        )
    if not force:
        raise RecipectlError(
            f"{out} already exists; nothing was written", fix="name a new file, or pass --force to replace it"
        )


def write_out(out: str, text: str, *, flag: str) -> None:
    """Write ``text`` to ``out`` in one rename (a kill leaves the old file or none, never half of
    one), after check_out; an OS refusal is the user's to fix, named with ``flag``."""
    try:
        write_atomic(out, text)
    except OSError as e:
        raise RecipectlError(
            f"{out}: cannot write the recipe: {(e.strerror or type(e).__name__).lower()}",
            fix=f"{flag} names a file in a directory that exists and you can write to",
        ) from None
    sys.stderr.write(f"wrote {out}\n")
