"""`matrix:` expands one recipe file into concrete recipes (the seed's five prefill counts in one
file). Keys are dotted field paths; every combination of values makes one variant."""

from __future__ import annotations

import itertools
import re
from typing import Any

from .diagnostics import Category, Diagnostic, Severity
from .secretscan import redact_data, redact_text, secret_name

# One recipe file expands into at most this many variants (the seed has five), and into at most
# MAX_EXPANDED_VALUES values in all: a 4 KB file of seven 10-value keys is ten million recipes.
MAX_VARIANTS = 128
MAX_EXPANDED_VALUES = 400_000


def _diag(smap: Any, key: tuple[str | int, ...], message: str, fix: str) -> Diagnostic:
    pos = smap.locate(key)
    return Diagnostic(
        code="SCH003",
        severity=Severity.ERROR,
        category=Category.SCHEMA,
        message=message,
        fix=fix,
        path=".".join(map(str, key)),
        file=smap.file,
        line=pos[0] if pos else None,
        col=pos[1] if pos else None,
    )


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    cur = data
    for p in parts[:-1]:
        nxt = cur.get(p)
        if nxt is None:
            nxt = cur[p] = {}
        if not isinstance(nxt, dict):
            raise KeyError(dotted)
        cur = nxt
    cur[parts[-1]] = value


def _unshared(value: Any) -> Any:
    """A copy in which no two places share a mapping or list. YAML aliases (`decode.env: *roleenv`)
    load as one object in two places, and copy.deepcopy keeps that sharing: a matrix value set at
    prefill.env.UCX_TLS then reached decode's environment too."""
    if isinstance(value, dict):
        return {k: _unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unshared(v) for v in value]
    return value


def value_at(data: dict[str, Any], dotted: str) -> Any:
    """The value at a matrix key's dotted path in a variant's data (_set_path put it there)."""
    value: Any = data
    for part in dotted.split("."):
        value = value[part]
    return value


# What a run's name may hold (schema.Recipe's name check); a value's text with anything else in it is
# written as its words joined by '-'
_UNNAMEABLE = re.compile(r"[^A-Za-z0-9.-]+")
# A value's words past this length are its position instead; a variant's name past MAX_NAME is
# refused (run directories and lock files are named after it, within a file name's 255 bytes)
MAX_WORDS = 40
MAX_NAME = 200


def _words(value: Any) -> str:
    """A list or mapping (extra_args, env), or a string a name cannot hold, as its words joined by
    '-' (`["--foo", "1"]` is `foo-1`)."""
    if isinstance(value, dict):
        text = "-".join(f"{k}-{_words(v)}" for k, v in value.items())
    elif isinstance(value, list):
        text = "-".join(_words(v) for v in value)
    else:
        text = str(value)
    return re.sub(r"-{2,}", "-", _UNNAMEABLE.sub("-", text.replace("_", "-"))).strip("-.")


def _labels_of(key: str, values: list[Any]) -> list[str]:
    """One label per value of a matrix key, `prefill-endpoints-4`: the key's last two parts and the
    value. A scalar a name can hold as YAML wrote it, as labels always were (`True`, `0.9`, `-1`,
    ``""``: a variant keeps its name); any other value by its words, or, where they are none, longer
    than MAX_WORDS, or another value's label already, by its position (`prefill-extra-args-value-2`);
    credentials redacted alike by those words and their position (`...-redacted-1`, `...-redacted-2`).
    A value that holds a credential (`prefill.env.HF_TOKEN: [hf_...]`, `--api-key VALUE`) is
    labelled by the words of its redaction (`prefill-env-HF-TOKEN-redacted`): the variant's name is
    printed, written into rendered files and names run directories, where no `ignore:` lets a
    credential go. Two values still labelled alike are refused by expand_matrix."""
    last = key.split(".")[-1]
    stem = redact_text(f"{key.split('.')[-2] if '.' in key else key}-{last}").replace("<redacted>", "redacted")
    stem = stem.replace("_", "-")
    shown = [redact_data(v, last, hide=secret_name(last)) for v in values]
    texts: list[str | None] = []
    for v, v_shown in zip(values, shown, strict=True):
        written = str(v).replace("_", "-")
        scalar = not isinstance(v, (dict, list))
        nameable = scalar and v_shown == v and not _UNNAMEABLE.search(written)
        texts.append(written if nameable else None)
    taken = {x for x in texts if x is not None}
    worded = [_words(v) if t is None else None for v, t in zip(shown, texts, strict=True)]
    # two credentials redact to the same words: each keeps them (`redacted-1`, `redacted-2`), so that
    # no variant's name hides that it holds one (other values alike: the first keeps its words)
    repeated = {w for w in worded if w and "redacted" in w.split("-") and worded.count(w) > 1}
    out = []
    for i, (as_written, words) in enumerate(zip(texts, worded, strict=True), start=1):
        if as_written is not None:
            label = as_written
        elif words in repeated:
            label = f"{words}-{i}"
        elif words and len(words) <= MAX_WORDS and words not in taken:
            label = words
        else:
            label = f"value-{i}"
        taken.add(label)
        out.append(f"{stem}-{label}")
    return out


Variant = tuple[str | None, dict[str, Any], tuple[str, ...]]  # name, data, labels (None, data, () unexpanded)


def expand_matrix(data: dict[str, Any], smap: Any) -> tuple[list[Variant], list[Diagnostic]]:
    matrix = data.get("matrix")
    if not matrix:
        return [(None, data, ())], []
    diags: list[Diagnostic] = []
    if not isinstance(matrix, dict) or not all(isinstance(v, list) and v for v in matrix.values()):
        pos = smap.locate(("matrix",))
        return [], [
            Diagnostic(
                code="SCH003",
                severity=Severity.ERROR,
                category=Category.SCHEMA,
                message="matrix must map field paths to non-empty lists of values",
                fix="matrix:\n  prefill.endpoints: [4, 5, 6, 7, 8]",
                path="matrix",
                file=smap.file,
                line=pos[0] if pos else None,
                col=pos[1] if pos else None,
            )
        ]
    keys = list(matrix)
    bad = next((k for k in keys if not isinstance(k, str) or not k or "" in k.split(".")), None)
    if bad is not None:
        return [], [
            _diag(
                smap,
                ("matrix", str(bad)),
                f"matrix key {str(bad)!r} is not a dotted field path",
                "use a dotted path such as prefill.endpoints",
            )
        ]
    combos = 1
    for k in keys:
        combos *= len(matrix[k])
    if combos > MAX_VARIANTS or combos * max(1, len(smap.positions)) > MAX_EXPANDED_VALUES:
        return [], [
            _diag(
                smap,
                ("matrix",),
                f"the matrix makes {combos:,} recipes; at most {MAX_VARIANTS} "
                f"(and {MAX_EXPANDED_VALUES:,} values in all) are expanded",
                "split it into several recipe files, or sweep fewer values",
            )
        ]
    base = {k: v for k, v in data.items() if k != "matrix"}
    out: list[Variant] = []
    labelled = [list(zip(matrix[k], _labels_of(k, matrix[k]), strict=True)) for k in keys]
    for combo in itertools.product(*labelled):
        variant = _unshared(base)
        labels = []
        try:
            for k, (v, label) in zip(keys, combo, strict=True):
                _set_path(variant, k, v)
                labels.append(label)
        except KeyError as e:
            pos = smap.locate(("matrix", str(e.args[0])))
            diags.append(
                Diagnostic(
                    code="SCH003",
                    severity=Severity.ERROR,
                    category=Category.SCHEMA,
                    message=f"matrix key '{e.args[0]}' does not name a field path",
                    fix="use a dotted path such as prefill.endpoints",
                    path=f"matrix.{e.args[0]}",
                    file=smap.file,
                    line=pos[0] if pos else None,
                    col=pos[1] if pos else None,
                )
            )
            return [], diags
        name = f"{base.get('name', 'recipe')}.{'.'.join(labels)}"
        variant["name"] = name
        out.append((name, variant, tuple(labels)))
    names = [name for name, _, _ in out if name is not None]
    alike = next((n for n in names if names.count(n) > 1), None)
    if alike is not None:
        return [], [
            _diag(
                smap,
                ("matrix",),
                f"the matrix names two variants {alike!r}: two of its values are labelled alike",
                "give the values of each matrix key labels that differ (a scalar's text, a list's words)",
            )
        ]
    longest = max(names, key=len)
    if len(longest) > MAX_NAME:
        return [], [
            _diag(
                smap,
                ("matrix",),
                f"the matrix names a variant of {len(longest)} characters ({longest[:60]}...); run "
                f"directories and lock files are named after it: at most {MAX_NAME}",
                "fewer matrix keys, or shorter values (a list's words name it)",
            )
        ]
    return out, diags
