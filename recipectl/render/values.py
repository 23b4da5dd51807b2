"""Values that are only known where a process runs (a node's address, a secret), and how each
target writes them. Everything else is a plain string and is shell-quoted with shlex.quote."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

# `${NAME}` or `$NAME`, the whole value; an unmatched brace (`${NAME`, `$NAME}`) is text, written as it is
_ENV_REF = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class EnvRef:
    """`${NAME}` in a recipe: expanded on the node at run time, never written out as a value."""

    name: str

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name):
            raise ValueError(f"not a variable name: {self.name!r}")


@dataclass(frozen=True)
class NodeAddress:
    """The address of node `node`, resolved by each target (host list, Slurm node list, pod IP)."""

    node: int


@dataclass(frozen=True)
class UrlOf:
    """http://<address of node>:<port>, resolved by the target."""

    node: int
    port: int


@dataclass(frozen=True)
class HomePath:
    """`~/rest` in a recipe: the home directory of whoever runs the process (quoted, ~ would not expand)."""

    rest: str


Value = str | EnvRef | NodeAddress | UrlOf | HomePath


def path_value(path: str) -> Value:
    return HomePath(path[2:]) if path.startswith("~/") else path


def parse_env_value(value: str) -> Value:
    m = _ENV_REF.fullmatch(value)
    return EnvRef(m.group(1) or m.group(2)) if m else value


# ------------------------------------------------------------------------------- shell code
# Every word recipectl writes into a script is built here, from quoted parts: a literal goes through
# shlex.quote, an expansion (`${HF_TOKEN}`, `${NODES[2]}`, `$HOME`) is one recipectl made and is
# checked to be nothing else. The templates never quote: the Jinja2 environment (targets.py)
# quotes every value it writes unless it is Shell text made here.

_CONTROL = re.compile("[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]")
_EXPANSION = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?\}|[A-Za-z_][A-Za-z0-9_]*)")
_TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class Shell(str):
    """Text that is already shell code: made only by the functions below, from quoted parts."""

    __slots__ = ()


class Var(str):
    """A parameter expansion recipectl writes (`${NODES[2]}`, `${HF_TOKEN}`, `$HOME`); nothing else."""

    __slots__ = ()

    def __new__(cls, text: str):
        if not _EXPANSION.fullmatch(text):
            raise ValueError(f"not a parameter expansion: {text!r}")
        return super().__new__(cls, text)


class Token(Shell):
    """A name recipectl made or the schema restricted to [A-Za-z0-9_.-] (process names, the recipe's
    name, variable names): the same text quoted or not, so it may stand inside double quotes."""

    __slots__ = ()

    def __new__(cls, text: str):
        if not _TOKEN.fullmatch(text):
            raise ValueError(f"not a plain name: {text!r}")
        return super().__new__(cls, text)


def quote(text: str) -> Shell:
    """One literal shell word. A control character cannot be quoted into a comment or a log line
    safely, and the schema lets none through: finding one here is a bug, not bad input."""
    if _CONTROL.search(text):
        raise ValueError(f"a control character in a rendered value: {text!r}")
    return Shell(shlex.quote(text))


def _safe(text: str) -> bool:
    return shlex.quote(text) == text and not _CONTROL.search(text)


def concat(*parts: str) -> Shell:
    """One shell word of literals and expansions (Var). `"http://${NODES[0]}:8100"` when every literal
    needs no quoting (it then means the same inside double quotes), else the parts side by side,
    each literal quoted with shlex: `"$HOME"'/my dir'`."""
    if all(isinstance(p, Var) or _safe(p) for p in parts):
        return Shell('"' + "".join(parts) + '"')
    return Shell("".join(f'"{p}"' if isinstance(p, Var) else quote(p) for p in parts))


def shell_word(value: Value, node_expr=None) -> Shell:
    """One shell word. Literals are quoted with shlex; references expand on the node. `node_expr`
    gives a node's address: a host name (a literal) or a Var such as `${NODES[1]}`."""
    if isinstance(value, EnvRef):
        return concat(Var(f"${{{value.name}}}"))
    if isinstance(value, HomePath):
        return Shell(f'"{Var("$HOME")}"/' + quote(value.rest))
    if isinstance(value, (NodeAddress, UrlOf)):
        if node_expr is None:
            raise ValueError("a node address needs the target's resolver")
        addr = node_expr(value.node)
        return concat(addr) if isinstance(value, NodeAddress) else concat("http://", addr, f":{value.port}")
    return quote(value)


def shell_join(args, node_expr=None) -> Shell:
    return Shell(" ".join(shell_word(a, node_expr) for a in args))


def literal(value: Value, hosts: list[str]) -> str:
    """For the local launcher: every value must be concrete."""
    if isinstance(value, NodeAddress):
        return hosts[value.node]
    if isinstance(value, UrlOf):
        return f"http://{hosts[value.node]}:{value.port}"
    if isinstance(value, HomePath):
        return os.path.join(os.path.expanduser("~"), value.rest)
    if isinstance(value, EnvRef):
        return os.environ.get(value.name, "")
    return value


def shell_lines(args, node_expr=None, indent: str = "  ") -> Shell:
    """Like shell_join, but one `--flag value` per line (continuations), for readable scripts."""
    words = [shell_word(a, node_expr) for a in args]
    lines: list[str] = []
    for w, raw in zip(words, args, strict=True):
        if isinstance(raw, str) and raw.startswith("--") or not lines:
            lines.append(w)
        else:
            lines[-1] += " " + w
    return Shell((" \\\n" + indent).join(lines))
