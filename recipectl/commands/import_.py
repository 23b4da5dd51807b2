"""`recipectl import FILE`: a recipe in another format (srt-slurm, Dynamo, vllm serve command lines)
written as recipectl's YAML, each value with a comment saying where it came from, and the list of
what could not be carried (printed to stderr and written as comments).

The recipe is built as a YAML document (ruamel.yaml's round-trip mappings and sequences) and
serialised by the YAML library: every key and value of the original is data, quoted and escaped
as YAML needs, and every comment is one line (`comment_text`). Nothing the original says can
add a key to the written recipe, however it is spelled.
"""

from __future__ import annotations

import io
import re
import sys
import unicodedata
from dataclasses import replace
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tokens import CommentToken

from ..errors import RecipectlError
from ..fileio import UnreadableFile, read_text_bounded
from ..formats import import_text, is_native
from ..formats.common import Dropped
from ..secretscan import pure_reference, redact_text, secret_flag, secret_name
from . import echo
from .outfile import check_out, write_out

# the order a reader expects, as in recipes/
_ORDER = (
    "version",
    "name",
    "description",
    "model",
    "engine",
    "cluster",
    "prefill",
    "decode",
    "kv_transfer",
    "router",
    "workload",
    "checks",
    "launch",
)

# what a YAML parser takes for the end of a line, or refuses in a stream, besides the C0 controls
_LINE_BREAKS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")  # controls, format (bidi, zero-width, BOM), separators


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_FLAG_VALUE = re.compile(r"(--?[A-Za-z0-9][A-Za-z0-9-]*)([= ]+)(\S+)")
_JSON_PAIR = re.compile(r'"([^"\\]{1,200})"(\s*:\s*)"((?:[^"\\]|\\.)*)"')
_WITHHELD = "a credential: recipectl writes none into a recipe"


def import_recipe(file: str, *, out: str | None = None, force: bool = False) -> int:
    try:
        text = read_text_bounded(file)
    except UnreadableFile as e:
        raise RecipectlError(
            f"{file}: cannot read the file: {e.reason}",
            fix="name an srt-slurm recipe, a Dynamo manifest or vllm serve lines",
        ) from None
    if is_native(text):
        raise RecipectlError(f"{file} is a recipectl recipe already", fix=f"recipectl validate {file}")
    imported = import_text(text, file)  # NotImportable, listing the formats it reads, for any other file
    withhold_secrets(imported)
    if out is not None:
        check_out(out, [file, *imported.files], force=force)
    yaml_text = to_yaml(imported)
    for d in imported.dropped:
        where = f"{d.file}:{d.line}" if d.line else d.file
        sys.stderr.write(comment_text(f"{where}: not carried: {d.what}: {d.why}") + "\n")
    if out is None:
        echo(yaml_text)
    else:
        write_out(out, yaml_text, flag="-o")
    return 0


def withhold_secrets(imported) -> None:
    """In place: no credential of the original reaches the recipe, its comments or the list of
    what was not carried. A credential-named or credential-shaped environment value becomes a
    reference to the variable of that name (`HF_TOKEN: ${HF_TOKEN}`), a credential flag's value
    in extra_args a reference (`--api-key ${VLLM_API_KEY}`); any other credential-shaped value is
    not carried. The texts quoted from the original have such values as `<redacted>`."""
    withheld: set[tuple] = set()
    _withhold(imported, (), imported.data, withheld)
    imported.origins = {
        path: replace(o, text="" if path in withheld else redact(o.text), note=redact(o.note))
        for path, o in imported.origins.items()
    }
    imported.dropped = [replace(d, what=redact(d.what), why=redact(d.why)) for d in imported.dropped]


def _withhold(imported, path: tuple, node: Any, withheld: set[tuple]) -> None:
    if isinstance(node, dict):
        for key in list(node):
            value, here = node[key], path + (key,)
            if not isinstance(value, str):
                _withhold(imported, here, value, withheld)
            elif not pure_reference(value) and (secret_name(str(key)) or redact(value) != value):
                if path[-1:] == ("env",) and _NAME.fullmatch(str(key)):
                    node[key] = f"${{{key}}}"
                    withheld.add(here)
                    if here in imported.origins:
                        imported.origins[here] = replace(
                            imported.origins[here], note=f"{_WITHHELD}: set {key} where it runs"
                        )
                else:
                    del node[key]
                    _dropped_secret(imported, here, Dropped)
        return
    if isinstance(node, list):
        hide_next: str | None = None
        for i, item in enumerate(node):
            here = path + (i,)
            if not isinstance(item, str):
                _withhold(imported, here, item, withheld)
                hide_next = None
                continue
            flag = secret_flag(item)
            if hide_next and not pure_reference(item):
                node[i] = f"${{{hide_next}}}"
                withheld.add(here)
            elif flag and "=" in item and not pure_reference(item.split("=", 1)[1]):
                node[i] = f"{flag}=${{{_flag_variable(flag)}}}"
                withheld.add(here)
            elif redact(item) != item and not pure_reference(item):
                node[i] = "<redacted>"
                withheld.add(here)
            hide_next = _flag_variable(flag) if flag and "=" not in item else None
        gone = {i for i, item in enumerate(node) if item == "<redacted>" and path + (i,) in withheld}
        # a flag whose value is not carried goes with it: alone it would take the next word as its value
        flags = {
            i - 1
            for i in gone
            if i and isinstance(node[i - 1], str) and node[i - 1].startswith("-") and "=" not in node[i - 1]
        }
        gone |= flags
        for i in sorted(gone):
            withheld.discard(path + (i,))
            if i - 1 in flags:  # the flag's own entry says it
                imported.origins.pop(path + (i,), None)
            else:
                word = f"{node[i]} and its value" if i in flags else node[i]
                _dropped_secret(imported, path + (i,), Dropped, word)
        if gone:  # the items after a removed one move up, and their origins with them
            kept = [i for i in range(len(node)) if i not in gone]
            moved = {old: new for new, old in enumerate(kept)}
            n = len(path)
            imported.origins = {
                (p[:n] + (moved[p[n]],) + p[n + 1 :] if p[:n] == path and len(p) > n and p[n] in moved else p): o
                for p, o in imported.origins.items()
            }
            withheld_here = {p for p in withheld if p[:n] == path and len(p) > n and p[n] in moved}
            withheld -= withheld_here
            withheld |= {p[:n] + (moved[p[n]],) + p[n + 1 :] for p in withheld_here}
            node[:] = [node[i] for i in kept]


def _dropped_secret(imported, path: tuple, dropped_type: Any, word: Any = None) -> None:
    origin = imported.origins.pop(path, None)
    what = word if isinstance(word, str) and word.startswith("-") else ".".join(str(p) for p in path)
    imported.dropped.append(
        dropped_type(
            origin.file if origin else imported.file,
            origin.line if origin else None,
            redact(what),
            f"{_WITHHELD}; pass it by reference",
        )
    )


def _flag_variable(flag: str) -> str:
    """The environment variable a credential flag's reference names: vLLM's own where it has one."""
    name = flag.lstrip("-").upper().replace("-", "_")
    return {"API_KEY": "VLLM_API_KEY"}.get(name, name)


def redact(text: str) -> str:
    """`text` with each credential in it as `<redacted>`: credential-shaped runs, the value of a
    credential-named assignment or JSON member, the word after a credential flag."""
    if not text:
        return text
    text = redact_text(text)
    text = _ASSIGNMENT.sub(
        lambda m: f"{m[1]}=<redacted>" if secret_name(m[1]) and not pure_reference(m[2]) else m[0], text
    )
    text = _JSON_PAIR.sub(lambda m: f'"{m[1]}"{m[2]}"<redacted>"' if secret_name(m[1]) else m[0], text)
    return _FLAG_VALUE.sub(
        lambda m: f"{m[1]}{m[2]}<redacted>" if secret_flag(m[1]) and not pure_reference(m[3]) else m[0], text
    )


def comment_text(text: str) -> str:
    """`text` on one line: each character a YAML parser reads as a line break, refuses, or that
    hides text from a reader (controls, bidi and zero-width format characters, line and paragraph
    separators) written as its escape (`\\n`, `\\u2028`)."""
    return "".join(_escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _LINE_BREAKS:
        return _LINE_BREAKS[ch]
    code = ord(ch)
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES and code not in (0xFFFE, 0xFFFF):
        return ch
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def to_yaml(imported) -> str:
    """The recipe as YAML, keys in recipectl's order, a `# from FILE:LINE` comment on each value."""
    data = imported.data
    doc = CommentedMap()
    for key in [k for k in _ORDER if k in data] + [k for k in data if k not in _ORDER]:
        doc[key] = _node(imported, (key,), data[key], flow=False)
        _add_comment(doc, imported, (key,))
    doc.yaml_set_start_comment(
        "\n".join(
            [
                comment_text(f"Imported by recipectl from {', '.join(imported.files)} ({imported.format})."),
                "Each value says where it came from in the original; values without a comment are recipectl's.",
                "",
                "",
            ]
        )
    )
    if imported.dropped:
        lines = ["Not carried over:"]
        for d in imported.dropped:
            where = f"{d.file}:{d.line}" if d.line else d.file
            lines.append(f"  {where}: {d.what}: {d.why}")
        _end_comment(doc, lines)
    out = io.StringIO()
    _dumper().dump(doc, out)
    return out.getvalue()


def _node(imported, path: tuple, value: Any, *, flow: bool) -> Any:
    """`value` as a document node: a mapping or list with its items' comments, or the scalar."""
    if isinstance(value, dict):
        flow = flow or not value or _is_flow(path)
        node = CommentedMap()
        for k, v in value.items():
            node[k] = _node(imported, path + (k,), v, flow=flow)
            if not flow and not _block_list(path + (k,), v):  # a block list: its items say
                _add_comment(node, imported, path + (k,))
        if flow:
            node.fa.set_flow_style()
        return node
    if isinstance(value, list):
        flow = flow or not _block_list(path, value)
        seq = CommentedSeq(_node(imported, path + (i,), v, flow=True) for i, v in enumerate(value))
        if flow:
            seq.fa.set_flow_style()
        else:
            for i in range(len(value)):
                _add_comment(seq, imported, path + (i,))
        return seq
    return value


def _add_comment(parent: Any, imported, path: tuple) -> None:
    """The `# from FILE:LINE` comment at the end of the line of `path` (two spaces after its value)."""
    o = imported.origins.get(path)
    if o is None:
        return
    said = f" {o.text}" if o.text and len(o.text) <= 80 else ""
    note = f" ({o.note})" if o.note else ""
    token = CommentToken(" " + comment_text(f"# from {o.file}:{o.line}{said}{note}"), CommentMark(0))
    # the slot ruamel keeps a key's (a mapping's) or an item's (a list's) end-of-line comment in
    parent.ca.items[path[-1]] = [None, None, token, None] if isinstance(parent, CommentedMap) else [token, None]


def _end_comment(doc: Any, lines: list[str]) -> None:
    """Comment lines after the document's last line, after a blank line."""
    tokens = [CommentToken("\n", CommentMark(0))]
    tokens += [CommentToken(f"# {comment_text(line)}\n", CommentMark(0)) for line in lines]
    doc.yaml_end_comment_extend(tokens, clear=True)


def _dumper() -> Any:
    """ruamel.yaml's round-trip dumper, quoting as YAML 1.1 reads: the loader (PyYAML) takes
    `yes`, `on`, `0o17`-less octals and `1_000` as 1.1 says, so a string spelled like one of
    them must be quoted even where YAML 1.2 would not."""

    class Yaml11Resolver(VersionedResolver):
        @property
        def processing_version(self) -> Any:
            return (1, 1)

    y = YAML(typ="rt")
    y.Resolver = Yaml11Resolver
    y.width = 1 << 16  # never fold a long value onto a second line
    y.allow_unicode = True
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    y.representer.add_representer(float, _represent_float)
    y.representer.add_representer(str, _represent_str)
    return y


# ruamel.yaml writes text starting with `?` or `:` plain inside a flow collection, where a reader
# takes `? a` for the key `a` and refuses `: *a` (the other indicators it quotes itself)
_INDICATORS = frozenset("?:")


def _represent_str(representer: Any, value: str) -> Any:
    """Text with a line break, control or format character in double quotes, each escaped: in
    the other styles ruamel.yaml writes U+0085 as it is, and a reader folds it into a space.
    Text that starts with `?` or `:` is double-quoted too (`_INDICATORS`)."""
    style = '"' if comment_text(value) != value or value[:1] in _INDICATORS else None
    return representer.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_float(representer: Any, value: float) -> Any:
    """A float as YAML 1.1 reads one back: `1e-05` (no dot) is a string there, `1.0e-05` a float."""
    if value != value:
        text = ".nan"
    elif value in (float("inf"), float("-inf")):
        text = ".inf" if value > 0 else "-.inf"
    else:
        text = repr(value).lower()
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _block_list(path: tuple, value: Any) -> bool:
    """A list written one item a line, each with its comment: extra_args (the others on one line)."""
    return isinstance(value, list) and bool(value) and path[-1] == "extra_args"


def _is_flow(path: tuple) -> bool:
    """Mappings written on one line: a speculative config, connector extra config."""
    return path[-1] in ("speculative_config", "extra_config")
