"""YAML -> Recipe, keeping the line and column of every key so that schema errors and rule
findings point at the file position a user can jump to.

Everything that can go wrong with user input ends as a Diagnostic (never a traceback):
unreadable file, YAML syntax, duplicate keys, wrong types, unknown keys (with a did-you-mean),
impossible values.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from .diagnostics import Category, Diagnostic, Severity
from .fileio import UnreadableFile
from .formats import NATIVE, import_text, sniff
from .formats.registry import NotImportable, PeerFileInvalid
from .matrix import expand_matrix
from .models.info import ModelConfigError, ModelFacts, infer_model_section, read_model_facts
from .schema import Recipe
from .secretscan import redact_text
from .yamlsource import (
    FAST_LOADER,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    DuplicateKey,
    PathKey,
    Position,
    Refused,
    SourceMap,
    Walker,
    dotted_to_key,
    hidden_character,
    key_to_dotted,
    may_quote,
    read_recipe_text,
)


@dataclass
class LoadedRecipe:
    """One concrete recipe from a file (a matrix file gives one per variant) and where its keys stand."""

    recipe: Recipe
    source: SourceMap
    raw: dict[str, Any]
    variant: str | None = None  # set for recipes expanded from a matrix
    labels: tuple[str, ...] = ()  # its matrix labels (`prefill-endpoints-4`), each a key and its value

    def diagnostic(self, *, path: str, **kwargs: Any) -> Diagnostic:
        key = dotted_to_key(path)
        pos = self.source.locate(key)
        line, col = pos if pos else (None, None)
        return Diagnostic(path=path, file=self.source.file_of(key), line=line, col=col, **kwargs)


@dataclass
class LoadResult:
    """What loading one file gave: its recipes and the schema's findings."""

    file: str
    recipes: list[LoadedRecipe]
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not any(d.severity is Severity.ERROR for d in self.diagnostics)


def _schema_diag(
    file: str, message: str, pos: Position | None, *, path: str = "", fix: str | None = None, code: str = "SCH001"
) -> Diagnostic:
    line, col = pos if pos else (None, None)
    return Diagnostic(
        code=code,
        severity=Severity.ERROR,
        message=message,
        fix=fix,
        path=path,
        file=file,
        line=line,
        col=col,
        category=Category.SCHEMA,
    )


def parse_yaml(text: str, file: str) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """Parse YAML text into plain data plus a source map; problems come back as diagnostics."""
    if len(text) > MAX_FILE_BYTES:
        return (
            None,
            SourceMap(file=file),
            [
                _schema_diag(
                    file, f"the file is larger than {MAX_FILE_BYTES // 1024} KiB: not a recipe", None, code="SCH000"
                )
            ],
        )
    if FAST_LOADER is not None:
        try:
            return _parse_yaml(text, file, FAST_LOADER)
        except yaml.MarkedYAMLError as e:
            if "exceeded maximum nesting depth" in str(e.problem):  # the Python parser would overflow its stack
                return None, SourceMap(file=file), [_syntax_diag(file, e)]
        except (yaml.YAMLError, ValueError):  # ValueError: text libyaml cannot take (a lone surrogate)
            pass  # reported below, in the Python parser's words
    try:
        return _parse_yaml(text, file, yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        # a line break only YAML sees is the likelier cause of a syntax error than what it reports
        hidden = hidden_character(text, file=file)
        if hidden is not None:
            return None, SourceMap(file=file), [_refused_diag(file, hidden)]
        return None, SourceMap(file=file), [_syntax_diag(file, e)]
    except yaml.YAMLError as e:
        return None, SourceMap(file=file), [_schema_diag(file, f"YAML error: {e}", None, code="SCH000")]
    except RecursionError:  # the pure-Python parser recurses once per nesting level
        return (
            None,
            SourceMap(file=file),
            [
                _schema_diag(
                    file,
                    "YAML error: nested too deeply to parse",
                    None,
                    code="SCH000",
                    fix=f"a recipe nests a few levels (at most {MAX_DEPTH})",
                )
            ],
        )


def _syntax_diag(file: str, e: yaml.MarkedYAMLError) -> Diagnostic:
    mark = e.problem_mark or e.context_mark
    pos = (mark.line + 1, mark.column + 1) if mark else None
    msg = f"YAML syntax error: {e.problem or e.context}"
    if e.context and e.problem:
        msg += f" ({e.context})"
    return _schema_diag(
        file, msg, pos, code="SCH000", fix="fix the YAML syntax at this position (indentation, quotes, ':' after keys)"
    )


def _parse_yaml(text: str, file: str, loader_class: type) -> tuple[Any, SourceMap, list[Diagnostic]]:
    """One parse with `loader_class`; YAML syntax errors are raised for parse_yaml to word."""
    smap = SourceMap(file=file)
    # one parse: the node tree gives the positions, and the same tree is constructed into data
    # (what yaml.safe_load does after composing)
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return (
                None,
                smap,
                [
                    _schema_diag(
                        file,
                        "the file is empty",
                        (1, 1),
                        code="SCH000",
                        fix="start from a recipe in recipes/ (recipectl show --resolved)",
                    )
                ],
            )
        smap.positions[()] = (node.start_mark.line + 1, node.start_mark.column + 1)
        walker = Walker(loader, smap.positions)
        walker.walk(node, ())
        hidden = hidden_character(text, walker.spans, file)
        if hidden is not None:
            raise hidden
        data = loader.construct_document(node)
    except DuplicateKey as e:
        return (
            None,
            smap,
            [
                _schema_diag(
                    file,
                    f"duplicate key '{e.key}' (first defined at line {e.first.line + 1})",
                    (e.mark.line + 1, e.mark.column + 1),
                    code="SCH000",
                    fix="keep one of the two keys",
                )
            ],
        )
    except Refused as e:
        return None, smap, [_refused_diag(file, e)]
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        return (
            None,
            smap,
            [
                _schema_diag(
                    file, "a recipe must be a mapping of keys (version, model, engine, ...)", (1, 1), code="SCH000"
                )
            ],
        )
    if not all(isinstance(k, str) for k in data):
        return None, smap, [_schema_diag(file, "every top-level key must be a name", (1, 1), code="SCH000")]
    return data, smap, []


def _refused_diag(file: str, e: Refused) -> Diagnostic:
    pos = (e.mark.line + 1, e.mark.column + 1) if e.mark else None
    return _schema_diag(file, e.message, pos, path=key_to_dotted(e.path), fix=e.fix, code="SCH000")


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names valid at a pydantic error location (for did-you-mean suggestions)."""
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
    "float_type": "write a number",
    "string_type": "write a string (quote it if it looks like a number)",
    "list_type": "write a YAML list",
    "dict_type": "write a mapping of keys",
    "model_type": "write a mapping of keys",
    "missing": "add this key",
    "greater_than_equal": None,
    "literal_error": None,
}


_EMPTY = {"dict_type": "{}", "model_type": "{}", "list_type": "[]"}  # an empty value, per expected type


_MEMBER_TYPES = ("str", "int", "list[int]", "dict[str,any]")


def _data_location(loc: tuple, raw: Any) -> tuple:
    """A pydantic error location as keys of the recipe: pydantic puts the union members it tried
    among them (a model's name such as 'Parallelism', a type such as 'str', 'function-after[...]'),
    and those are left out, but never a key the recipe has (an env name such as VLLM_FOO)."""
    out: list = []
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(part, str) and (part.startswith("function-") or part[:1].isupper() or part in _MEMBER_TYPES):
            continue
        else:
            node = None
        out.append(part)
    return tuple(out)


def validation_diagnostics(err: ValidationError, smap: SourceMap, raw: dict, prefix: PathKey = ()) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for e in err.errors(include_url=False):
        loc = _data_location(e["loc"], raw)
        full = prefix + loc
        dotted = key_to_dotted(full)
        pos = smap.locate(full)
        etype = e["type"]
        fix = _TYPE_FIXES.get(etype)
        if etype == "extra_forbidden":
            key = str(loc[-1]) if loc else "?"
            allowed = _fields_at(Recipe, loc)
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
            out.append(
                _schema_diag(
                    smap.file,
                    f"'{key}' has no value (YAML reads a key with nothing after it as null)",
                    pos,
                    path=dotted,
                    code="SCH001",
                    fix=f"remove the key to use its default, or write {key}: {empty}"
                    if empty
                    else "remove the key to use its default, or give it a value",
                )
            )
            continue
        msg = e["msg"]
        if etype == "missing":
            msg = f"missing required key '{loc[-1]}'" if loc else "missing required key"
        elif "input" in e and not isinstance(e["input"], (dict, list)) and may_quote(e["input"], full):
            msg = f"{msg} (got {e['input']!r})"
        msg = redact_text(msg)  # a message the schema words itself may quote the value
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if etype == "value_error" and "ctx" in e and isinstance(e["ctx"].get("error"), ValueError):
            err_obj = e["ctx"]["error"]
            fix = getattr(err_obj, "fix", None) or fix
            if isinstance(getattr(err_obj, "field", None), str):  # raised above the field it concerns
                dotted = err_obj.field
                pos = smap.locate(prefix + dotted_to_key(dotted))
        out.append(_schema_diag(smap.file, msg, pos, path=dotted, fix=fix, code="SCH001"))
    return out


def load_text(text: str, file: str = "<recipe>", *, base_dir: Path | None = None) -> LoadResult:
    if sniff(text) != NATIVE:  # an srt-slurm recipe, a Dynamo manifest, vllm serve command lines
        return load_imported(text, file, base_dir=base_dir)
    data, smap, diags = parse_yaml(text, file)
    if data is None:
        return LoadResult(file, [], diags)
    variants, matrix_diags = expand_matrix(data, smap)
    if matrix_diags:
        return LoadResult(file, [], matrix_diags)
    recipes: list[LoadedRecipe] = []
    facts: dict[str, ModelFacts] = {}  # by model path: the variants of a matrix share a model
    for variant_name, variant, labels in variants:
        try:
            recipe = Recipe.model_validate(variant)
        except ValidationError as err:
            diags.extend(d for d in validation_diagnostics(err, smap, variant) if d not in diags)
            continue
        try:
            recipe = with_model_facts(recipe, base_dir, facts)
        except ModelConfigError as e:
            d = _model_config_diag(e, smap)
            if d not in diags:
                diags.append(d)
            continue
        recipes.append(LoadedRecipe(recipe=recipe, source=smap, raw=variant, variant=variant_name, labels=labels))
    return LoadResult(file, recipes, diags)


def with_model_facts(recipe: Recipe, base_dir: Path | None, known: dict[str, ModelFacts] | None = None) -> Recipe:
    """`recipe` carrying its model's facts (its config.json, read here, once), with what the recipe
    leaves out about its model (family, experts, spec, multimodal) filled in from them. `known`:
    facts already read, by model path. A config.json that cannot be read raises ModelConfigError."""
    path = recipe.model.path
    facts = known.get(path) if known is not None else None
    if facts is None:
        facts = read_model_facts(path, base_dir)
        if known is not None:
            known[path] = facts
    return recipe.with_model_facts(infer_model_section(recipe.model, facts), facts)


def _model_config_diag(e: ModelConfigError, smap: SourceMap) -> Diagnostic:
    """A model config.json that is there but unreadable, reported at the recipe's model.path."""
    return _schema_diag(
        smap.file, redact_text(str(e)), smap.locate(dotted_to_key(e.field)), path=e.field, fix=e.fix, code="SCH001"
    )


def load_imported(text: str, file: str, *, base_dir: Path | None = None) -> LoadResult:
    """A recipe in another format (recipectl.formats), validated like a native one; findings
    point at the original file's lines."""
    try:
        imported = import_text(text, file)
    except PeerFileInvalid as e:  # a value of the wrong type: one finding per value, at its line
        return LoadResult(
            file, [], validation_diagnostics(e.error, SourceMap(file=file, positions=e.positions), e.data)
        )
    except NotImportable as e:
        # "FILE:LINE[:COL]: what": the finding stands at that line, compiler-style
        m = re.match(re.escape(file) + r":(\d+)(?::(\d+))?: (.*)\Z", e.message, re.S)
        pos = (int(m.group(1)), int(m.group(2) or 1)) if m else None
        return LoadResult(file, [], [_schema_diag(file, m.group(3) if m else e.message, pos, code="SCH000", fix=e.fix)])
    smap = SourceMap(file=file, positions=imported.positions(), files=imported.files_by_path())
    try:
        recipe = with_model_facts(Recipe.model_validate(imported.data), base_dir)
    except ValidationError as err:
        return LoadResult(file, [], validation_diagnostics(err, smap, imported.data))
    except ModelConfigError as e:
        return LoadResult(file, [], [_model_config_diag(e, smap)])
    return LoadResult(file, [LoadedRecipe(recipe=recipe, source=smap, raw=imported.data)], [])


def load_file(path: str | Path) -> LoadResult:
    p = Path(path)
    shown = str(path)
    try:
        text = read_recipe_text(p)
    except UnreadableFile as e:
        message = "no such file" if e.missing else f"cannot read the file: {e.reason}"
        return LoadResult(shown, [], [_schema_diag(shown, message, None, code="SCH000")])
    return load_text(text, shown, base_dir=p.parent)


def load_stream(stream: BinaryIO, name: str, *, base_dir: Path | None = None) -> LoadResult:
    """A recipe read from a byte stream (standard input for `validate -`), named `name` in findings;
    at most MAX_FILE_BYTES, UTF-8, as a file would be."""
    try:
        data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        return LoadResult(
            name, [], [_schema_diag(name, f"cannot read standard input: {e.strerror or e}", None, code="SCH000")]
        )
    if len(data) > MAX_FILE_BYTES:
        return LoadResult(
            name,
            [],
            [_schema_diag(name, f"larger than {MAX_FILE_BYTES // 1024} KiB: not a recipe", None, code="SCH000")],
        )
    try:
        text = data.decode("utf-8")
    except ValueError as e:
        return LoadResult(name, [], [_schema_diag(name, f"cannot read standard input: {e}", None, code="SCH000")])
    return load_text(text, name, base_dir=base_dir)
