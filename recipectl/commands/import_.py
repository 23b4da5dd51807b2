"""`recipectl import FILE`: a recipe in another format (srt-slurm, Dynamo, vllm serve command lines)
written as recipectl's YAML, each value with a comment saying where it came from, and the list of
what could not be carried (printed to stderr and written as comments)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..errors import RecipectlError
from . import echo

# the order a reader expects, as in recipes/
_ORDER = ("version", "name", "description", "model", "engine", "cluster", "prefill", "decode", "kv_transfer",
          "router", "workload", "checks", "launch")


def import_recipe(file: str, *, out: str | None = None) -> int:
    from ..formats import NATIVE, import_text, sniff

    p = Path(file)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecipectlError(f"{file}: cannot read the file: {e}") from None
    fmt = sniff(text)
    if fmt == NATIVE:
        from ..formats import _NATIVE_RE

        if _NATIVE_RE.search(text):
            raise RecipectlError(f"{file} is a recipectl recipe already", fix=f"recipectl validate {file}")
        raise RecipectlError(f"{file}: not a format recipectl imports",
                             fix="recipectl import reads srt-slurm recipes, Dynamo DynamoGraphDeployment manifests "
                                 "and vllm serve command lines")
    imported = import_text(text, file, fmt)
    yaml_text = to_yaml(imported)
    for d in imported.dropped:
        where = f"{d.file}:{d.line}" if d.line else d.file
        sys.stderr.write(f"{where}: not carried: {d.what}: {d.why}\n")
    if out is None:
        echo(yaml_text)
    else:
        Path(out).write_text(yaml_text, encoding="utf-8")
        sys.stderr.write(f"wrote {out}\n")
    return 0


def to_yaml(imported) -> str:
    """The recipe as YAML, keys in recipectl's order, a `# from FILE:LINE` comment on each value."""
    lines = [f"# Imported by recipectl from {', '.join(imported.files)} ({imported.format}).",
             "# Each value says where it came from in the original; values without a comment are recipectl's.",
             ""]
    data = imported.data
    keys = [k for k in _ORDER if k in data] + [k for k in data if k not in _ORDER]
    for key in keys:
        _emit(lines, imported, (key,), data[key], 0)
    if imported.dropped:
        lines += ["", "# Not carried over:"]
        for d in imported.dropped:
            where = f"{d.file}:{d.line}" if d.line else d.file
            lines.append(f"#   {where}: {d.what}: {d.why}")
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 20, sort_keys=False).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text.strip()


def _comment(imported, path: tuple) -> str:
    o = imported.origins.get(path)
    if o is None:
        return ""
    where = f"{o.file}:{o.line}"
    said = f" {o.text}" if o.text and len(o.text) <= 80 else ""
    note = f" ({o.note})" if o.note else ""
    return f"  # from {where}{said}{note}"


def _emit(lines: list[str], imported, path: tuple, value: Any, depth: int) -> None:
    pad = "  " * depth
    key = path[-1]
    if isinstance(value, dict) and value and not _is_flow(path):
        lines.append(f"{pad}{key}:{_comment(imported, path)}")
        for k, v in value.items():
            _emit(lines, imported, path + (k,), v, depth + 1)
    elif isinstance(value, list) and value and path[-1] == "extra_args":
        lines.append(f"{pad}{key}:")
        for i, item in enumerate(value):
            lines.append(f"{pad}  - {_scalar(item)}{_comment(imported, path + (i,))}")
    else:
        lines.append(f"{pad}{key}: {_scalar(value)}{_comment(imported, path)}")


def _is_flow(path: tuple) -> bool:
    """Mappings written on one line: a speculative config, connector extra config."""
    return path[-1] in ("speculative_config", "extra_config")
