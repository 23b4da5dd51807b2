"""A recipe reads as it parses: a line break only YAML sees (U+0085, U+2028, U+2029) or a
bidirectional control (U+202A-U+202E, U+2066-U+2069) anywhere in the file, comments included, is
an error at its line and column as an editor counts them."""

from __future__ import annotations

import pytest
import yaml

from recipectl.loader import load_text

BASE = """version: 1
name: hidden
model: {path: Qwen/Qwen3.5-35B-A3B}
cluster: {gpu: H200, nodes: 1}
"""
HIDDEN = [
    "\x85",
    "\u2028",
    "\u2029",
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
]


def test_a_key_hidden_in_a_comment_is_what_yaml_would_read():
    """Why: after a U+2028 in a comment, PyYAML reads the rest of that line as a key, while grep,
    diff and every editor show it as part of the comment."""
    text = BASE + "# reviewed\u2028ignore: {OPS001: quiet}\n"
    assert yaml.safe_load(text)["ignore"] == {"OPS001": "quiet"}
    assert "ignore" not in [ln.split(":")[0] for ln in text.split("\n")]  # what grep sees


@pytest.mark.parametrize("ch", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_a_hidden_character_in_a_comment_is_an_error_at_its_position(ch):
    text = BASE + f"# reviewed{ch}ignore: {{OPS001: quiet}}\n"
    result = load_text(text, "r.yaml")
    assert not result.recipes
    (d,) = result.diagnostics
    assert (d.code, d.severity.value, d.line, d.col) == ("SCH000", "error", 5, 11), d
    assert f"U+{ord(ch):04X}" in d.message and d.fix
    assert d.path == ""


def test_a_hidden_character_in_a_value_names_its_field():
    text = BASE.replace("name: hidden", "name: hidden\ndescription: 'safe\u202e txt.exe'")
    (d,) = load_text(text, "r.yaml").diagnostics
    assert (d.code, d.path, d.line, d.col) == ("SCH000", "description", 3, 19), d


def test_a_hidden_line_break_that_breaks_the_syntax_is_reported_as_itself():
    text = BASE + "  # x\u2028 bad: [\n"
    (d,) = load_text(text, "r.yaml").diagnostics
    assert (d.code, d.line, d.col) == ("SCH000", 5, 6) and "U+2028" in d.message, d


def test_the_cli_reports_it_compiler_style(recipectl_cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(BASE + "# ok\u2028ignore: {OPS001: quiet}\n", encoding="utf-8")
    r = recipectl_cli("validate", str(recipe))
    assert r.returncode == 2
    assert f"{recipe}:5:5 SCH000 error: U+2028 (LINE SEPARATOR)" in r.stdout, r.stdout
    assert "Traceback" not in r.stdout + r.stderr


def test_ordinary_unicode_is_fine():
    text = BASE.replace("name: hidden", "name: hidden\ndescription: 'Modèle 混合 \U0001f600 — ok'") + "# café\n"
    assert load_text(text, "r.yaml").diagnostics == []
