"""The files commands write at the user's request (`import -o`, `plan --write-recipe`, `lock`):
which names they refuse, and the one atomic write with its error."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from ..errors import RecipectlError
from ..fileio import same_file_as, write_atomic
from ..loader import LoadedRecipe
from ..models.info import config_path


def files_read(loaded: LoadedRecipe, recipe_path: str) -> list[str]:
    """Every file a command read to make a recipe: the recipe, the files it was imported from (a
    `vllm serve` script's partner script) and the model's config.json. What the command writes may
    be none of them, whatever --force says."""
    model_dir = Path(recipe_path).parent
    return [recipe_path, *loaded.source.files.values(), str(config_path(loaded.recipe.model.path, model_dir))]


def check_out(
    out: str, inputs: list[str], *, force: bool, flag: str = "-o", read_as: str = "being imported", what: str = "recipe"
) -> None:
    """Refuse an OUT that is not a new file the user named: an existing file without --force, a
    symlink (writing would replace the link, never its target: either is a surprise), a directory,
    or a file the command reads (one inode under any name: the original would be lost), or anything
    else that is not a regular file (a FIFO, a socket, a device: `--force` would replace
    `/dev/null` itself with the recipe). `flag` names the option that gave OUT, `read_as` what the
    command does with its input, `what` the file it writes (the messages say all three)."""
    if not out:
        raise RecipectlError(f"{flag} is empty; nothing was written", fix=f"{flag} names the {what} file to write")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as e:
        raise cannot_write(out, e, flag=flag, what=what) from None
    if stat.S_ISLNK(st.st_mode):
        raise RecipectlError(
            f"{out} is a symbolic link; nothing was written",
            fix=f"name the file itself with {flag} (or remove the link); recipectl never writes through or over a link",
        )
    if stat.S_ISDIR(st.st_mode):
        raise RecipectlError(f"{out} is a directory; nothing was written", fix=f"{flag} names the {what} file to write")
    if not stat.S_ISREG(st.st_mode):
        raise RecipectlError(
            f"{out} is not a regular file (a FIFO, socket or device); nothing was written",
            fix=f"{flag} names the {what} file to write"
            + ("; without -o the recipe goes to standard output" if flag == "-o" and what == "recipe" else ""),
        )
    read = same_file_as(out, inputs)
    if read is not None:
        raise RecipectlError(
            f"{out} is {read}, the file {read_as}; nothing was written",
            fix=f"write the {what} to another file" + (f", e.g. {flag} recipe.yaml" if what == "recipe" else ""),
        )
    if not force:
        raise RecipectlError(
            f"{out} already exists; nothing was written", fix="name a new file, or pass --force to replace it"
        )


def check_can_create(out: str, *, flag: str, what: str) -> None:
    """Refuse an OUT whose directory will not take a new file (missing, read-only, not ours), by
    making one there and removing it: for a command that writes OUT only after minutes of work."""
    directory = os.path.dirname(out) or "."
    try:
        fd, probe = tempfile.mkstemp(prefix=".recipectl-probe.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise cannot_write(out, e, flag=flag, what=what) from None
    os.close(fd)
    os.unlink(probe)


def write_out(out: str, text: str, *, flag: str) -> None:
    """Write ``text`` to ``out`` in one rename (a kill leaves the old file or none, never half of
    one), after check_out; an OS refusal is the user's to fix, named with ``flag``."""
    try:
        write_atomic(out, text)
    except OSError as e:
        raise cannot_write(out, e, flag=flag) from None
    sys.stderr.write(f"wrote {out}\n")


def cannot_write(out: str, e: OSError, *, flag: str, what: str = "recipe") -> RecipectlError:
    """The error of a file the OS would not let a command write (a read-only or full disk, a missing
    directory, no permission): the path, the OS's reason, and that the old file is as it was."""
    reason = (e.strerror or type(e).__name__).lower()
    return RecipectlError(
        f"{out}: cannot write the {what}: {reason}; nothing was written",
        fix=f"{flag} names a file in a directory that exists and you can write to, on a disk with room",
    )
