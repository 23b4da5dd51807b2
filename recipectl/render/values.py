"""Values that are only known where a process runs (a node's address, a secret), and how each
target writes them. Everything else is a plain string and is shell-quoted with shlex."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_ENV_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


@dataclass(frozen=True)
class EnvRef:
    """`${NAME}` in a recipe: expanded on the node at run time, never written out as a value."""

    name: str

    def shell(self) -> str:
        return f'"${{{self.name}}}"'


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
    m = _ENV_REF.match(value)
    return EnvRef(m.group(1)) if m else value


def shell_word(value: Value, node_expr=None) -> str:
    """One shell word. Literals are quoted with shlex; references expand on the node."""
    if isinstance(value, EnvRef):
        return value.shell()
    if isinstance(value, HomePath):
        return '"$HOME"/' + shlex.quote(value.rest)
    if isinstance(value, (NodeAddress, UrlOf)):
        if node_expr is None:
            raise ValueError("a node address needs the target's resolver")
        addr = node_expr(value.node)
        return f'"{addr}"' if isinstance(value, NodeAddress) else f'"http://{addr}:{value.port}"'
    return shlex.quote(value)


def shell_join(args, node_expr=None) -> str:
    return " ".join(shell_word(a, node_expr) for a in args)


def literal(value: Value, hosts: list[str]) -> str:
    """For the local launcher: every value must be concrete."""
    if isinstance(value, NodeAddress):
        return hosts[value.node]
    if isinstance(value, UrlOf):
        return f"http://{hosts[value.node]}:{value.port}"
    if isinstance(value, HomePath):
        import os

        return os.path.join(os.path.expanduser("~"), value.rest)
    if isinstance(value, EnvRef):
        import os

        return os.environ.get(value.name, "")
    return value


def shell_lines(args, node_expr=None, indent: str = "  ") -> str:
    """Like shell_join, but one `--flag value` per line (continuations), for readable scripts."""
    words = [shell_word(a, node_expr) for a in args]
    lines: list[str] = []
    for w, raw in zip(words, args, strict=True):
        if isinstance(raw, str) and raw.startswith("--") or not lines:
            lines.append(w)
        else:
            lines[-1] += " " + w
    return (" \\\n" + indent).join(lines)
