"""Project settings for `recipectl validate`, found as ruff finds its configuration.

For each recipe, the nearest `recipectl.toml`, or `pyproject.toml` with a `[tool.recipectl]`
table, in the recipe's directory or one above it (in one directory, `recipectl.toml` first; a
`pyproject.toml` without the table is passed over); failing that, the nearest one above the
current directory. `--config FILE` names one for every recipe. Keys:

    select = ["ALL"]                 # rule codes, prefixes (HYB, VER0), names; the default is ALL
    extend-select = []               # added to select (and to --select)
    ignore = ["CAP001"]              # rules turned off, named in the summary
    severity = { PRF002 = "error" }  # a rule (or prefix) reported at another severity

On the command line, `--select` replaces `select`; `--extend-select`, `--ignore` and
`--severity` add to the file's. A key or selector the file gets wrong is a usage error (exit 2).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RecipectlError
from .fileio import UnreadableFile, read_text_bounded
from .rules.selection import Selection, UnknownSelector, matching, parse_severity, split

CONFIG_NAMES = ("recipectl.toml", "pyproject.toml")
KEYS = ("select", "extend-select", "ignore", "severity")
MAX_CONFIG_BYTES = 1 << 20  # a settings file is a few lines; /dev/zero as one once took 1.9 GB


@dataclass(frozen=True)
class Settings:
    """The settings a config file holds (all empty: no file)."""

    path: Path | None = None
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity: tuple[str, ...] = ()  # CODE=level

    @property
    def where(self) -> str:
        if self.path is None:
            return ""
        shown = _shown(self.path)
        return f"{shown} [tool.recipectl]" if self.path.name == "pyproject.toml" else shown


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


_found: dict[Path, Path | None] = {}  # directory -> its nearest config file; kept for one run
_loaded: dict[Path, Settings] = {}


def forget() -> None:
    """Start a run afresh: config files may have changed since the last one in this process."""
    _found.clear()
    _loaded.clear()


def find_config(start: Path) -> Path | None:
    """The nearest config file in `start` or a directory above it."""
    start = start.resolve()
    seen: list[Path] = []
    found: Path | None = None
    for d in (start, *start.parents):
        if d in _found:
            found = _found[d]
            break
        seen.append(d)
        found = next((d / n for n in CONFIG_NAMES if _is_config(d / n)), None)
        if found is not None:
            break
    for d in seen:
        _found[d] = found
    return found


def _is_config(path: Path) -> bool:
    """A recipectl.toml that is there (one that cannot be read is then refused by load_settings,
    never passed over: it would change which rules run), or a readable pyproject.toml with a
    [tool.recipectl] table."""
    if path.name != "pyproject.toml":
        return path.exists() and not path.is_dir()
    try:
        text = read_text_bounded(path, MAX_CONFIG_BYTES)
    except UnreadableFile:  # missing, a FIFO, too large, not UTF-8: not this project's settings
        return False
    return "[tool.recipectl" in text and "recipectl" in _parse(path, text).get("tool", {})


def _parse(path: Path, text: str) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipectlError(f"{_shown(path)}: not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per nested array or table
        raise RecipectlError(f"{_shown(path)}: not valid TOML: nested too deeply") from None


def load_settings(path: Path) -> Settings:
    path = path.resolve()
    if path in _loaded:
        return _loaded[path]
    try:
        text = read_text_bounded(path, MAX_CONFIG_BYTES)
    except UnreadableFile as e:
        raise RecipectlError(
            f"{_shown(path)}: cannot read the settings: {e.reason}",
            fix="a recipectl.toml, or a pyproject.toml with [tool.recipectl], is a small text file",
        ) from None
    data = _parse(path, text)
    table = data.get("tool", {}).get("recipectl", {}) if path.name == "pyproject.toml" else data
    where = f"{_shown(path)}" + (" [tool.recipectl]" if path.name == "pyproject.toml" else "")
    for key in table:
        if key not in KEYS:
            close = difflib.get_close_matches(key, KEYS, n=1)
            raise RecipectlError(
                f"{where}: unknown key {key!r}",
                fix=f"did you mean {close[0]}?" if close else "keys: " + ", ".join(KEYS),
            )

    def strings(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RecipectlError(f'{where}: {key} must be a list of rule codes, e.g. ["HYB", "PRF002"]')
        return tuple(split(value))

    severity = table.get("severity", {})
    if not isinstance(severity, dict) or not all(isinstance(v, str) for v in severity.values()):
        raise RecipectlError(f'{where}: severity must be a table of CODE = "error" | "warning" | "info"')
    settings = Settings(
        path=path,
        select=strings("select") if "select" in table else None,
        extend_select=strings("extend-select"),
        ignore=strings("ignore"),
        severity=tuple(f"{k}={v}" for k, v in severity.items()),
    )
    for key, values in (
        ("select", settings.select or ()),
        ("extend-select", settings.extend_select),
        ("ignore", settings.ignore),
        ("severity", settings.severity),
    ):
        _check(f"{settings.where}: {key}", values, levels=key == "severity")
    _loaded[path] = settings
    return settings


def settings_for(recipe: Path | None, config: str | None) -> Settings:
    """The settings that apply to `recipe` (None: standard input without a name)."""
    if config is not None:
        return load_settings(Path(config))
    found = find_config(recipe.parent if recipe is not None else Path.cwd())
    if found is None and recipe is not None:
        found = find_config(Path.cwd())
    return load_settings(found) if found is not None else Settings()


def _check(label: str, selectors: tuple[str, ...] | list[str], *, levels: bool = False) -> None:
    for s in selectors:
        if levels:
            try:
                s = parse_severity(s)[0]
            except ValueError as e:
                raise RecipectlError(f"{label}: {e}") from None
        try:
            matching(s)
        except UnknownSelector as e:
            raise RecipectlError(f"{label}: {e.describe()}", fix="recipectl rules lists every code and name") from None


def check_command_line(
    select: list[str] | None, extend_select: list[str] | None, ignore: list[str] | None, severity: list[str] | None
) -> None:
    """Refuse (exit 2) a command-line selector that names no rule, before any file is read."""
    for key, values in (
        ("--select", split(select)),
        ("--extend-select", split(extend_select)),
        ("--ignore", split(ignore)),
        ("--severity", list(severity or ())),
    ):
        _check(key, values, levels=key == "--severity")


def selection(
    settings: Settings,
    *,
    select: list[str] | None = None,
    extend_select: list[str] | None = None,
    ignore: list[str] | None = None,
    severity: list[str] | None = None,
) -> Selection:
    """The file's settings with the command line's on top."""
    chosen = split(select) or settings.select or ("ALL",)
    reasons = [(s, f"ignore in {settings.where}") for s in settings.ignore]
    reasons += [(s, "--ignore") for s in split(ignore)]
    levels = [parse_severity(s) for s in (*settings.severity, *(severity or ()))]
    return Selection(
        select=tuple(chosen),
        extend_select=(*settings.extend_select, *split(extend_select)),
        ignore=tuple(reasons),
        severity=tuple(levels),
    )
