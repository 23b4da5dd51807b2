"""YAML -> Recipe, keeping the line and column of every key so that schema errors and rule
findings point at the file position a user can jump to.

Everything that can go wrong with user input ends as a Diagnostic (never a traceback):
unreadable file, YAML syntax, duplicate keys, wrong types, unknown keys (with a did-you-mean),
impossible values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .diagnostics import Category, Diagnostic, Severity
from .schema import Recipe
from .secretscan import redact_text, secret_name, secret_value

Position = tuple[int, int]  # 1-based line, column
PathKey = tuple[str | int, ...]


@dataclass
class SourceMap:
    """Where each key/item of the YAML document stands (1-based line, column)."""

    file: str
    positions: dict[PathKey, Position] = field(default_factory=dict)

    def locate(self, path: PathKey) -> Position | None:
        """The position of `path`, or of its nearest ancestor that exists in the file."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get((), None)


@dataclass
class LoadedRecipe:
    """One concrete recipe from a file (a matrix file gives one per variant) and where its keys stand."""
    recipe: Recipe
    source: SourceMap
    raw: dict[str, Any]
    variant: str | None = None  # set for recipes expanded from a matrix

    def diagnostic(self, *, path: str, **kwargs: Any) -> Diagnostic:
        pos = self.source.locate(dotted_to_key(path))
        line, col = pos if pos else (None, None)
        return Diagnostic(path=path, file=self.source.file, line=line, col=col, **kwargs)


@dataclass
class LoadResult:
    """What loading one file gave: its recipes and the schema's findings."""
    file: str
    recipes: list[LoadedRecipe]
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not any(d.severity is Severity.ERROR for d in self.diagnostics)


def dotted_to_key(path: str) -> PathKey:
    out: list[str | int] = []
    for part in path.split(".") if path else []:
        out.append(int(part) if part.isdigit() else part)
    return tuple(out)


def key_to_dotted(key: PathKey) -> str:
    return ".".join(str(p) for p in key)


# Limits on what one recipe file may ask of the loader. A recipe is a few hundred nodes; these are
# far past any real one and keep a hostile file (an alias bomb, a 1,000-deep nesting, a 4 KB
# matrix of millions of combinations) to a fast refusal instead of minutes of CPU and gigabytes.
MAX_FILE_BYTES = 1 << 20  # 1 MiB of YAML
MAX_NODES = 20_000  # nodes of the document with every alias expanded
MAX_DEPTH = 64  # nested mappings/sequences
MAX_INT = 2**53  # larger whole numbers mean nothing in a recipe (and lose precision as floats)

_STD = "tag:yaml.org,2002:"
_TAGS_CHECKED = {_STD + t for t in ("bool", "int", "float", "null", "timestamp")}
_TAGS_OK = _TAGS_CHECKED | {_STD + t for t in ("str", "seq", "map", "merge")}


class _DuplicateKey(Exception):
    def __init__(self, key: str, mark: yaml.Mark, first: yaml.Mark):
        self.key, self.mark, self.first = key, mark, first


class _Refused(Exception):
    """The document is well-formed YAML that no recipe can be: reported at `mark`, never constructed."""

    def __init__(self, message: str, mark: yaml.Mark | None, path: PathKey, fix: str | None = None):
        self.message, self.mark, self.path, self.fix = message, mark, path, fix


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag


class _Walker:
    """Records where each key stands, and refuses what would make construction or validation
    blow up: aliases that expand past MAX_NODES (or into themselves), nesting past MAX_DEPTH,
    tags a recipe has no use for, scalars their tag cannot construct (`!!bool maybe`,
    `!!int abc`), numbers out of range, .inf/.nan, and text that is not valid Unicode."""

    def __init__(self, loader: Any, positions: dict[PathKey, Position]):
        self.loader = loader
        self.positions = positions
        self.count = 0
        self.open: set[int] = set()  # ids of the collection nodes being walked (an alias to one is a cycle)

    def walk(self, node: yaml.Node, path: PathKey, depth: int = 0) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            raise _Refused(f"the document expands to more than {MAX_NODES:,} values (aliases included)",
                           node.start_mark, path, "write the values out; a recipe needs a few hundred")
        if node.tag not in _TAGS_OK:
            raise _Refused(f"tag {_tag_name(node.tag)} has no place in a recipe", node.start_mark, path,
                           "remove the tag; write a plain value")
        if isinstance(node, yaml.ScalarNode):
            self._scalar(node, path)
            return
        if depth >= MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", node.start_mark, path)
        if id(node) in self.open:
            raise _Refused("an alias refers to the node that contains it (a recursive alias)",
                           node.start_mark, path, "anchor a value, and use its alias outside of it")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                self._mapping(node, path, depth)
            else:
                for i, item in enumerate(node.value):
                    self.positions[path + (i,)] = (item.start_mark.line + 1, item.start_mark.column + 1)
                    self.walk(item, path + (i,), depth + 1)
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: PathKey, depth: int) -> None:
        seen: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _STD + "merge":  # `<<: *anchor`: keys keep the anchor's position
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for m in merged:
                    if isinstance(m, yaml.MappingNode):
                        self.walk(m, path, depth)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _Refused("a key must be a plain name, not a list or mapping", key_node.start_mark, path)
            self.walk(key_node, path, depth + 1)
            key = str(key_node.value)
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark, seen[key])
            seen[key] = key_node.start_mark
            child = path + (key,)
            self.positions[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            self.walk(value_node, child, depth + 1)

    def _scalar(self, node: yaml.ScalarNode, path: PathKey) -> None:
        value = node.value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Refused("the text is not valid Unicode (a lone surrogate, e.g. an escaped \\udc80)",
                           node.start_mark, path, "remove the escape, or write the character itself") from None
        if node.tag not in _TAGS_CHECKED:
            return
        implicit = self.loader.resolve(yaml.ScalarNode, value, (True, False))
        accepted = {node.tag} | ({_STD + "int"} if node.tag == _STD + "float" else set())
        if implicit not in accepted:
            raise _Refused(f"{_quoted(value, path)} is not a valid {_tag_name(node.tag)}", node.start_mark, path,
                           {"bool": "write true or false", "int": "write a whole number",
                            "float": "write a number", "null": "write null, or remove the key"}
                           .get(node.tag[len(_STD):], "remove the tag"))
        try:
            constructed = self.loader.construct_object(node)
        except (ValueError, OverflowError, yaml.YAMLError):  # e.g. past Python's 4,300-digit int limit
            raise _Refused(f"{_quoted(value, path)} is not a valid {_tag_name(node.tag)}", node.start_mark,
                           path) from None
        if isinstance(constructed, bool) or not isinstance(constructed, (int, float)):
            return
        if isinstance(constructed, float) and constructed != constructed or constructed in (float("inf"),
                                                                                           float("-inf")):
            raise _Refused(f"{_quoted(value, path, bare=True)} is not a finite number", node.start_mark, path,
                           "write a finite number")
        if abs(constructed) > MAX_INT:
            raise _Refused(f"{_quoted(value, path, bare=True)} is out of range (a recipe's numbers are below 2**53)",
                           node.start_mark, path, "write a realistic number")


def _short(text: str, limit: int = 40) -> str:
    """A value as a message may quote it: long ones cut (a message never carries a whole blob)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


_QUOTE_LIMIT = 40  # longer values are never quoted back in a message


def _may_quote(value: Any, path: PathKey) -> bool:
    """Whether a message may quote `value` back: short, not under a credential-named key (an env
    var, a flag's neighbour), not credential-shaped. Findings are printed, logged, pasted."""
    if isinstance(value, (bytes, bytearray)):
        return False
    text = str(value)
    if len(text) > _QUOTE_LIMIT or secret_value(text):
        return False
    return not any(isinstance(p, str) and secret_name(p) for p in path)


def _quoted(value: str, path: PathKey, *, bare: bool = False) -> str:
    """`value` as a refusal may quote it (cut when long), or "the value" where it must not be quoted."""
    if secret_value(value) or not _may_quote(value[:_QUOTE_LIMIT], path):
        return "the value"
    return _short(value) if bare else repr(_short(value))


def _schema_diag(file: str, message: str, pos: Position | None, *, path: str = "", fix: str | None = None,
                 code: str = "SCH001") -> Diagnostic:
    line, col = pos if pos else (None, None)
    return Diagnostic(code=code, severity=Severity.ERROR, message=message, fix=fix, path=path, file=file,
                      line=line, col=col, category=Category.SCHEMA)


# libyaml's parser (PyYAML's C binding, in its wheels) composes a recipe ~10x faster than the pure
# Python one, with the same node tree, tags and marks. Its error messages are terser, so a file it
# rejects is parsed again by the Python parser, whose message (and position) is the one reported.
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """Parse YAML text into plain data plus a source map; problems come back as diagnostics."""
    if len(text) > MAX_FILE_BYTES:
        return None, SourceMap(file=file), [_schema_diag(
            file, f"the file is larger than {MAX_FILE_BYTES // 1024} KiB: not a recipe", None, code="SCH000")]
    if _FAST_LOADER is not None:
        try:
            return _parse_yaml(text, file, _FAST_LOADER)
        except yaml.MarkedYAMLError as e:
            if "exceeded maximum nesting depth" in str(e.problem):  # the Python parser would overflow its stack
                return None, SourceMap(file=file), [_syntax_diag(file, e)]
        except (yaml.YAMLError, ValueError):  # ValueError: text libyaml cannot take (a lone surrogate)
            pass  # reported below, in the Python parser's words
    try:
        return _parse_yaml(text, file, yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        return None, SourceMap(file=file), [_syntax_diag(file, e)]
    except yaml.YAMLError as e:
        return None, SourceMap(file=file), [_schema_diag(file, f"YAML error: {e}", None, code="SCH000")]
    except RecursionError:  # the pure-Python parser recurses once per nesting level
        return None, SourceMap(file=file), [_schema_diag(
            file, "YAML error: nested too deeply to parse", None, code="SCH000",
            fix=f"a recipe nests a few levels (at most {MAX_DEPTH})")]


def _syntax_diag(file: str, e: yaml.MarkedYAMLError) -> Diagnostic:
    mark = e.problem_mark or e.context_mark
    pos = (mark.line + 1, mark.column + 1) if mark else None
    msg = f"YAML syntax error: {e.problem or e.context}"
    if e.context and e.problem:
        msg += f" ({e.context})"
    return _schema_diag(file, msg, pos, code="SCH000",
                        fix="fix the YAML syntax at this position (indentation, quotes, ':' after keys)")


def _parse_yaml(text: str, file: str, loader_class: type) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """One parse with `loader_class`; YAML syntax errors are raised for parse_yaml to word."""
    smap = SourceMap(file=file)
    # one parse: the node tree gives the positions, and the same tree is constructed into data
    # (what yaml.safe_load does after composing)
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, smap, [_schema_diag(file, "the file is empty", (1, 1), code="SCH000",
                                             fix="start from a recipe in recipes/ (recipectl show --resolved)")]
        smap.positions[()] = (node.start_mark.line + 1, node.start_mark.column + 1)
        _Walker(loader, smap.positions).walk(node, ())
        data = loader.construct_document(node)
    except _DuplicateKey as e:
        return None, smap, [_schema_diag(
            file, f"duplicate key '{e.key}' (first defined at line {e.first.line + 1})",
            (e.mark.line + 1, e.mark.column + 1), code="SCH000", fix="keep one of the two keys")]
    except _Refused as e:
        pos = (e.mark.line + 1, e.mark.column + 1) if e.mark else None
        return None, smap, [_schema_diag(file, e.message, pos, path=key_to_dotted(e.path), fix=e.fix,
                                         code="SCH000")]
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        return None, smap, [_schema_diag(file, "a recipe must be a mapping of keys (version, model, engine, ...)",
                                         (1, 1), code="SCH000")]
    if not all(isinstance(k, str) for k in data):
        return None, smap, [_schema_diag(file, "every top-level key must be a name", (1, 1), code="SCH000")]
    return data, smap, []


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names valid at a pydantic error location (for did-you-mean suggestions)."""
    from typing import get_args, get_origin

    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            # dict values / union members: look inside the annotation for a model
            return []
        ann = fields[part].annotation
        candidates = [ann, *get_args(ann)]
        for a in list(candidates):
            candidates.extend(get_args(a))
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if current is None and get_origin(ann) is not None:
            return []
    if current is None or not hasattr(current, "model_fields"):
        return []
    names = []
    for name, f in current.model_fields.items():
        names.append(f.alias or name)
    return names


_TYPE_FIXES = {
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "bool_parsing": "write true or false",
    "bool_type": "write true or false",
    "float_parsing": "write a number",
    "string_type": "write a string (quote it if it looks like a number)",
    "list_type": "write a YAML list",
    "dict_type": "write a mapping of keys",
    "model_type": "write a mapping of keys",
    "missing": "add this key",
    "greater_than_equal": None,
    "literal_error": None,
}


_EMPTY = {"dict_type": "{}", "model_type": "{}", "list_type": "[]"}  # an empty value, per expected type


def validation_diagnostics(err: ValidationError, smap: SourceMap, raw: dict, prefix: PathKey = ()) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        # pydantic reports union/tagged members in the location (e.g. 'str', 'Parallelism'); drop them
        loc = tuple(p for p in loc if not (isinstance(p, str) and p[:1].isupper()))
        loc = tuple(p for p in loc if p not in ("str", "int", "list[int]", "dict[str,any]"))
        full = prefix + loc
        dotted = key_to_dotted(full)
        pos = smap.locate(full)
        etype = e["type"]
        fix = _TYPE_FIXES.get(etype)
        if etype == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            allowed = _fields_at(Recipe, loc)
            import difflib  # only for a misspelt key

            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            msg = f"unknown key '{key}'"
            if close:
                fix = f"did you mean '{close[0]}'?"
            elif allowed:
                fix = "valid keys here: " + ", ".join(sorted(allowed))
            out.append(_schema_diag(smap.file, msg, pos, path=dotted, fix=fix, code="SCH002"))
            continue
        if e.get("input", ...) is None and loc and isinstance(loc[-1], str):
            # `env:` with nothing under it (its only entry deleted or commented out): YAML's null
            key, empty = loc[-1], _EMPTY.get(etype)
            out.append(_schema_diag(
                smap.file, f"'{key}' has no value (YAML reads a key with nothing after it as null)", pos,
                path=dotted, code="SCH001",
                fix=f"remove the key to use its default, or write {key}: {empty}" if empty
                else "remove the key to use its default, or give it a value"))
            continue
        msg = e["msg"]
        if etype == "missing":
            msg = f"missing required key '{loc[-1]}'" if loc else "missing required key"
        elif "input" in e and not isinstance(e["input"], (dict, list)) and _may_quote(e["input"], full):
            msg = f"{msg} (got {e['input']!r})"
        msg = redact_text(msg)  # a message the schema words itself may quote the value
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        if etype == "value_error" and "ctx" in e and isinstance(e["ctx"].get("error"), ValueError):
            err_obj = e["ctx"]["error"]
            fix = getattr(err_obj, "fix", None) or fix
            if isinstance(getattr(err_obj, "field", None), str):  # raised above the field it concerns
                dotted = err_obj.field
                pos = smap.locate(prefix + dotted_to_key(dotted))
        out.append(_schema_diag(smap.file, msg, pos, path=dotted, fix=fix, code="SCH001"))
    return out


def load_text(text: str, file: str = "<recipe>", *, base_dir: Path | None = None) -> LoadResult:
    from .matrix import expand_matrix  # local import keeps the cycle away

    data, smap, diags = parse_yaml(text, file)
    if data is None:
        return LoadResult(file, [], diags)
    variants, matrix_diags = expand_matrix(data, smap)
    if matrix_diags:
        return LoadResult(file, [], matrix_diags)
    recipes: list[LoadedRecipe] = []
    for variant_name, variant in variants:
        try:
            recipe = Recipe.model_validate(variant, context={"base_dir": base_dir})
        except ValidationError as err:
            diags.extend(d for d in validation_diagnostics(err, smap, variant) if d not in diags)
            continue
        recipes.append(LoadedRecipe(recipe=recipe, source=smap, raw=variant, variant=variant_name))
    return LoadResult(file, recipes, diags)


def read_recipe_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The text of a regular file of at most `limit` bytes. A FIFO, device or directory is refused
    without being opened for a blocking read (`validate` on a FIFO waited forever). Raises
    OSError or UnicodeDecodeError; a `ValueError` for what is not a readable recipe file."""
    import stat

    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise ValueError("a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file (a FIFO, socket or device)")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between the stat and the open
            raise ValueError("not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"larger than {limit // 1024} KiB: not a recipe")
    return b"".join(chunks).decode("utf-8")


def load_file(path: str | Path) -> LoadResult:
    p = Path(path)
    shown = str(path)
    try:
        text = read_recipe_text(p)
    except FileNotFoundError:
        return LoadResult(shown, [], [_schema_diag(shown, "no such file", None, code="SCH000")])
    except ValueError as e:  # UnicodeDecodeError included
        return LoadResult(shown, [], [_schema_diag(shown, f"cannot read the file: {e}", None, code="SCH000")])
    except OSError as e:
        return LoadResult(shown, [], [_schema_diag(shown, f"cannot read the file: {e.strerror or e}", None,
                                                   code="SCH000")])
    return load_text(text, shown, base_dir=p.parent)
