"""Shell scripts as words with their positions: enough of POSIX sh to read launch scripts and
point a finding at the original line."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    """One shell word with its position (1-based) in the original file."""

    text: str
    line: int
    col: int
    # the offsets in `text` of the `$` and `}` that the script quoted ('$X', \$X, ${A:-'}'}): text,
    # never an expansion nor the end of one
    literal: tuple[int, ...] = ()
    # the command substitutions in it (`$(cat model.txt)`, a backquoted command), as written: their
    # output is known only when the script runs (`$(NAME)`, which reads like Kubernetes' `$(VAR)`,
    # is a reference: placeholders.py)
    substitutions: tuple[str, ...] = ()
    # an array assignment's items (`ARGS=(--tp 8 "a b")`: `--tp`, `8`, `a b`), each with its own
    # position: the word's text is `ARGS=(...)` as written, its items are what shellvars reads
    items: tuple[Word, ...] | None = None
    # the offsets in `text` of the `$` written inside double quotes: `"${ARGS[@]}"` gives each item
    # as one word, an unquoted `${ARGS[@]}` splits them at blanks
    double_quoted: tuple[int, ...] = ()
    # an array assignment whose `(` no `)` closed before the command ended: bash refuses the script
    unclosed: bool = False


_SEPARATORS = (";", "&&", "||", "&", "|")  # the two-character ones before their one-character prefixes
_K8S_LIKE = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_]*\)")  # `$(NAME)`: a reference (placeholders.py)
_ARRAY_OPENS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=\Z")  # `NAME=(` / `NAME+=(`: an array's items follow


def shell_words(
    script: str, line0: int = 1, col0: int = 0, *, block_indent: int = 0, k8s_references: bool = False
) -> list[list[Word]]:
    """Split a shell script into simple commands of words, each word with its (line, col).

    Enough of POSIX sh for launch scripts: quotes, backslash escapes and line continuations,
    comments, `;`, `&`, `&&`, `||`, `|` and newlines (LF or CRLF) between commands; an array
    assignment `NAME=(...)` (or `+=`) is one word whose items may span lines; a command substitution
    (`$(cmd args)`, a backquoted command) is part of its word, spaces and all, not run. `line0` is
    the file line of the script's first line; `col0` the column offset of its first line,
    `block_indent` that of the others (a YAML block scalar). `k8s_references`: the script is a
    container's args, where Kubernetes replaces `$(NAME)` before the shell runs (placeholders.py),
    so `$(NAME)` is a reference; in a script a user runs it is a command like any other. No expansion: `$VAR` stays as
    written, and each word says which of its `$` the script quoted (shellvars.py expands the
    others; a `$` inside a command substitution counts as quoted) and which command substitutions
    it holds. Not `shlex`: it
    reports no column for a token (and only the line where a token ends), and a finding must
    point at the word's own line and column in the original file.

    One function of about 120 lines on purpose: a single-pass tokenizer whose branches all move the
    same cursor (index, line, column) and the same word being built; split into functions, each
    would take and return all of that state."""
    # A script saved with Windows line endings (CRLF) reads as its author wrote it: `\` then CRLF
    # continues the line. Positions stay: the CR stood at the end of its line.
    script = script.replace("\r\n", "\n")
    commands: list[list[Word]] = []
    current: list[Word] = []
    buf: list[str] = []
    literal: list[int] = []
    double_quoted: list[int] = []
    substitutions: list[str] = []
    start: tuple[int, int] | None = None
    line, col = line0, col0
    i, n = 0, len(script)
    # inside `NAME=(`: the assignment word's text, start and the command's words before it, while
    # `current` collects the items
    array: tuple[str, tuple[int, int], list[Word]] | None = None

    def pos() -> tuple[int, int]:
        return line, col + 1

    def end_word() -> None:
        nonlocal buf, start, literal, double_quoted, substitutions
        if start is not None:
            current.append(
                Word(
                    "".join(buf),
                    *start,
                    literal=tuple(literal),
                    substitutions=tuple(substitutions),
                    double_quoted=tuple(double_quoted),
                )
            )
        buf, start, literal, double_quoted, substitutions = [], None, [], [], []

    def open_array() -> None:
        nonlocal array, current, buf, start
        assert start is not None
        array, current = ("".join(buf), start, current), []
        buf, start = [], None
        advance()

    def close_array(closed: bool = True) -> None:
        """The `)` that ends the array; ``closed`` False: the script's end or a `;`, `&` or `|`
        came first, which bash refuses (the word says so, its items as they stand)."""
        nonlocal array, current
        assert array is not None
        end_word()
        opening, begun, before = array
        written = opening + "(" + " ".join(w.text for w in current) + (")" if closed else "")
        current, array = [*before, Word(written, *begun, items=tuple(current), unclosed=not closed)], None

    def end_command() -> None:
        nonlocal current
        if array is not None:
            close_array(closed=False)
        end_word()
        if current:
            commands.append(current)
        current = []

    def advance(k: int = 1) -> None:
        nonlocal i, line, col
        for _ in range(k):
            if script[i] == "\n":
                line += 1
                col = block_indent
            else:
                col += 1
            i += 1

    def substitution() -> None:
        """The `$(...)` (to its matching parenthesis, quotes and escapes inside) or backquoted
        command at the cursor, into the word as written."""
        begin, depth, quote = len(buf), 0, ""
        closer = "`" if script[i] == "`" else ")"
        if closer == "`":
            buf.append("`")
            advance()
        while i < n:
            ch = script[i]
            if ch == "\\" and quote != "'" and i + 1 < n:
                buf.append(ch)
                advance()
            elif quote:
                quote = "" if ch == quote else quote
            elif ch == closer and (closer == "`" or depth == 1):
                buf.append(ch)
                advance()
                break
            elif ch in "'\"" and closer == ")":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            buf.append(script[i])
            advance()
        written = "".join(buf[begin:])
        if not (k8s_references and _K8S_LIKE.fullmatch(written)):
            literal.extend(k for k in range(begin, len(buf)) if buf[k] == "$")
            substitutions.append(written)

    while i < n:
        c = script[i]
        if c == "\\" and i + 1 < n and script[i + 1] == "\n":  # line continuation
            advance(2)
            continue
        if c == "\n":
            if array is None:
                end_command()
            else:  # an array's items go on over lines
                end_word()
            advance()
            continue
        if c in " \t\r":
            end_word()
            advance()
            continue
        if c == "#" and start is None:  # a comment runs to the end of the line
            while i < n and script[i] != "\n":
                advance()
            continue
        if c == ")" and array is not None:
            close_array()
            advance()
            continue
        sep = next((s for s in _SEPARATORS if script.startswith(s, i)), None)
        if sep:
            end_command()
            advance(len(sep))
            continue
        if c == "(" and array is None and not literal and not substitutions and _ARRAY_OPENS.match("".join(buf)):
            open_array()
            continue
        if start is None:
            start = pos()
        if c == "'":
            advance()
            while i < n and script[i] != "'":
                if script[i] in "$}":
                    literal.append(len(buf))
                buf.append(script[i])
                advance()
            if i < n:
                advance()
            continue
        if c == '"':
            advance()
            while i < n and script[i] != '"':
                if script[i] == "\\" and i + 1 < n and script[i + 1] in '"\\$`\n':
                    if script[i + 1] == "$":
                        literal.append(len(buf))
                    if script[i + 1] != "\n":
                        buf.append(script[i + 1])
                    advance(2)
                    continue
                if script[i] == "`" or script.startswith("$(", i):
                    substitution()
                    continue
                if script[i] == "$":
                    double_quoted.append(len(buf))
                buf.append(script[i])
                advance()
            if i < n:
                advance()
            continue
        if c == "\\" and i + 1 < n:
            if script[i + 1] in "$}":
                literal.append(len(buf))
            buf.append(script[i + 1])
            advance(2)
            continue
        if c == "`" or script.startswith("$(", i):
            substitution()
            continue
        buf.append(c)
        advance()
    end_command()
    return commands
