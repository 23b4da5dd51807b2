"""`recipectl import` writes data, never YAML text: whatever a value, a key or a dropped word of the
original says (newlines, U+2028, `#`, `: `, a leading `-`, quotes, `yes`), the written recipe has
exactly the keys import meant to write and every value as it was read. Plus what `-o` refuses to
overwrite.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from recipectl.commands.import_ import _ORDER, comment_text, to_yaml
from recipectl.errors import RecipectlError
from recipectl.formats import import_text
from recipectl.formats.common import Dropped, Imported, Origin
from recipectl.yamlsource import FAST_LOADER

ROOT = Path(__file__).resolve().parent.parent
FIELD = ROOT / "tests" / "field"
LOADER = FAST_LOADER or yaml.SafeLoader  # the recipe loader's parser

# what turned values into structure before, and what YAML 1.1 reads as something other than text
HOSTILE = [
    "\n",
    "\r",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\t",
    "\x00",
    "\x7f",
    "\ufeff",
    "\u202e",
    "#",
    " #",
    ": ",
    "- ",
    "-",
    "? ",
    "engine: {venv: /tmp/evil}",
    "ignore: {OPS001: x, OPS005: y}",
    "launch:\n  run_dir: /",
    "'",
    '"',
    "\\",
    "{",
    "}",
    "[",
    "]",
    ",",
    "&a ",
    "*a",
    "!!python/object:os.system",
    "---",
    "...",
    "%YAML",
    "yes",
    "on",
    "No",
    "~",
    "null",
    "0x1F",
    "0o17",
    "017",
    "1_000",
    "1e3",
    "1:20",
    "<<",
    "=",
    "|",
    ">",
    "@",
    "`",
]
text = st.lists(
    st.one_of(st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=("Cs",)), max_size=8)), max_size=6
).map("".join)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _written(imported: Imported) -> str:
    written = to_yaml(imported)
    loaded = yaml.load(written, Loader=LOADER)
    # every value read survives as that value; no key added, none lost, at any depth
    assert loaded == imported.data, written
    assert set(loaded) <= set(_ORDER) or not set(imported.data) <= set(_ORDER)
    # each comment stayed one line: the list of what was not carried has one line per entry
    tail = written.split("\n# Not carried over:\n", 1)
    if imported.dropped:
        assert len(tail) == 2 and tail[1].count("\n") == len(imported.dropped), written
    else:
        assert len(tail) == 1
    return written


def _import(source: str, name: str) -> Imported:
    try:
        return import_text(source, name)
    except RecipectlError:  # exit 2, a clean refusal: not this test's concern
        reject()


def _yaml_scalar(value: str) -> str:
    """`value` as a double-quoted YAML scalar (how a hostile original would spell it)."""
    return yaml.safe_dump(value, default_style='"', width=1 << 20).strip().removesuffix("\n...").strip()


PAIR = """#!/bin/bash
export VLLM_SSM_CONV_STATE_LAYOUT=DS
export VLLM_EXTRA={env}
pip install vllm==0.26.0
CUDA_VISIBLE_DEVICES={gpus} vllm serve Qwen/Qwen3.5-35B-A3B {word} \\
  --port 8100 --no-enable-prefix-caching --served-model-name {served} \\
  --kv-transfer-config {kv} &
CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen3.5-35B-A3B --port 8200 \\
  --max-num-seqs 64 --some-new-flag {flag} {dashed} \\
  --kv-transfer-config '{{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}}' &
wait
"""


@SETTINGS
@given(st.fixed_dictionaries({k: text for k in ("env", "gpus", "word", "served", "flag", "dashed", "key", "value")}))
def test_vllm_serve_words_and_json_keys_stay_values(x):
    kv = json.dumps(
        {"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {x["key"]: x["value"]}}
    )
    script = PAIR.format(
        env=shlex.quote(x["env"]),
        gpus=shlex.quote(x["gpus"]),
        word=shlex.quote(x["word"]),
        served=shlex.quote(x["served"]),
        kv=shlex.quote(kv),
        flag=shlex.quote(x["flag"]),
        dashed=shlex.quote("--" + x["dashed"]),
    )
    _written(_import(script, "pair\n" + x["word"] + ".sh"))


SRT = (FIELD / "srt-slurm" / "qwen35-397b-gb200-4xdep2-1xdep8.yaml").read_text()


@SETTINGS
@given(text, text)
def test_srt_slurm_precision_and_name_stay_values(precision, name):
    assert "precision: NVFP4" in SRT and "\nname: qwen35-397b-nvfp4-gb200-4xdep2-1xdep8\n" in SRT
    source = SRT.replace("precision: NVFP4", f"precision: {_yaml_scalar(precision)}").replace(
        "\nname: qwen35-397b-nvfp4-gb200-4xdep2-1xdep8\n", f"\nname: {_yaml_scalar(name)}\n"
    )
    _written(_import(source, "srt.yaml"))


DYNAMO = (FIELD / "dynamo" / "known-bad-prefill-without-ds-layout.yaml").read_text()
DYNAMO_ENV = "- name: VLLM_SSM_CONV_STATE_LAYOUT\n              value: DS"


@SETTINGS
@given(text, text, text)
def test_dynamo_service_and_env_names_stay_values(service, env_name, env_value):
    assert "    Frontend:" in DYNAMO and DYNAMO_ENV in DYNAMO
    source = DYNAMO.replace("    Frontend:", f"    {_yaml_scalar(service)}:").replace(
        DYNAMO_ENV,
        f"- name: {_yaml_scalar(env_name)}\n              value: {_yaml_scalar(env_value)}\n            {DYNAMO_ENV}",
    )
    _written(_import(source, "dgd.yaml"))


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), text)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=20,
)


@SETTINGS
@given(
    st.dictionaries(st.one_of(st.sampled_from(_ORDER), text), trees, min_size=1, max_size=5),
    st.lists(st.tuples(text, text, text), max_size=4),
    text,
)
def test_any_data_and_any_comment_text_round_trip(data, notes, file):
    """The writer on its own: any keys and values, any origin, note and file name in the comments."""
    imported = Imported(format="dynamo", file=file, data=data, files=[file])
    for path in _paths(data):
        imported.origins[path] = Origin(file, 3, 1, notes[0][0] if notes else "", notes[0][1] if notes else "")
    imported.dropped = [Dropped(file, i or None, what, why) for i, (what, why, _) in enumerate(notes)]
    _written(imported)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def test_extra_args_items_are_written_one_a_line_each_with_its_comment():
    imported = Imported(format="vllm-serve", file="a.sh", files=["a.sh"])
    imported.set(("decode", "extra_args"), ["--x", "a\n- b"], Origin("a.sh", 2, 1, "--x"))
    imported.origins[("decode", "extra_args", 1)] = Origin("a.sh", 2, 5, "a\n- b")
    written = _written(imported)
    assert '  extra_args:\n    - --x\n    - "a\\n- b"  # from a.sh:2 a\\n- b\n' in written


def test_comment_text_is_one_line_and_shows_what_it_escaped():
    assert comment_text("a\nb\rc\u2028d\u2029e\x85f\u202eg\x00") == "a\\nb\\rc\\u2028d\\u2029e\\x85f\\u202eg\\x00"
    assert comment_text("plain: text # with a hash, ünïcode") == "plain: text # with a hash, ünïcode"


# ---------------------------------------------------------------------------------------------------
# the written recipe validates as the original does


def _recipectl(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _codes(result: subprocess.CompletedProcess) -> list[str]:
    return sorted(w for line in result.stdout.splitlines() for w in line.split()[1:2] if w[:3].isalpha())


def test_a_dynamo_file_that_fails_validate_still_fails_after_import(tmp_path):
    """Names that once wrote `ignore:` into the recipe: the imported recipe keeps every error."""
    payload = "Frontend\nignore: {HYB001: a, OPS003: b}\nlaunch:\n  run_dir: /\n#"
    source = tmp_path / "dgd.yaml"
    source.write_text(DYNAMO.replace("    Frontend:", f"    {_yaml_scalar(payload)}:"))
    before = _recipectl("validate", str(source))
    assert before.returncode == 1 and " error" in before.stdout, before.stdout
    out = tmp_path / "recipe.yaml"
    r = _recipectl("import", str(source), "-o", str(out))
    assert r.returncode == 0, r.stderr
    data = yaml.safe_load(out.read_text())
    assert "ignore" not in data and "launch" not in data
    after = _recipectl("validate", str(out))
    assert after.returncode == 1, after.stdout
    errors = [c for c in _codes(before) if f"{c} error" in before.stdout]
    assert errors and set(errors) <= set(_codes(after)), (before.stdout, after.stdout)


# ---------------------------------------------------------------------------------------------------
# -o: never over what the user did not name


SCRIPT = (FIELD / "vllm-serve" / "qwen35-35b-a3b-fp8-h100-pd.sh").read_text()


@pytest.fixture
def script(tmp_path) -> Path:
    p = tmp_path / "pd.sh"
    p.write_text(SCRIPT)
    return p


def test_out_refuses_an_existing_file_without_force(script, tmp_path):
    out = tmp_path / "recipe.yaml"
    out.write_text("mine\n")
    r = _recipectl("import", str(script), "-o", str(out))
    assert r.returncode == 2 and "already exists; nothing was written" in r.stderr and "--force" in r.stderr
    assert out.read_text() == "mine\n"
    r = _recipectl("import", str(script), "-o", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(out.read_text())["version"] == 1


def test_out_refuses_a_symlink_even_with_force(script, tmp_path):
    target = tmp_path / "elsewhere.yaml"
    target.write_text("keep\n")
    link = tmp_path / "recipe.yaml"
    link.symlink_to(target)
    for extra in ([], ["--force"]):
        r = _recipectl("import", str(script), "-o", str(link), *extra)
        assert r.returncode == 2 and "is a symbolic link; nothing was written" in r.stderr, r.stderr
        assert link.is_symlink() and target.read_text() == "keep\n"


def test_out_refuses_the_input_under_any_name(script, tmp_path):
    hard = tmp_path / "hard.sh"
    os.link(script, hard)
    for out in (script, hard, tmp_path / "." / "pd.sh"):
        r = _recipectl("import", str(script), "-o", str(out), "--force")
        assert r.returncode == 2 and "the file being imported; nothing was written" in r.stderr, r.stderr
    assert script.read_text() == SCRIPT


def test_out_into_a_missing_directory_is_a_clean_error(script, tmp_path):
    r = _recipectl("import", str(script), "-o", str(tmp_path / "no" / "recipe.yaml"))
    assert r.returncode == 2 and "cannot write the recipe" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("kind", ["binary", "fifo", "directory", "large"])
def test_an_input_that_is_no_text_file_is_exit_2(tmp_path, kind):
    p = tmp_path / "in.sh"
    if kind == "binary":
        p.write_bytes(b"vllm serve \xff\xfe\n")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()
    else:
        p.write_text("vllm serve m --port 8100\n" + "#" * (2 << 20) + "\n")
    r = _recipectl("import", str(p))
    assert r.returncode == 2 and "cannot read the file" in r.stderr and "Traceback" not in r.stderr, r.stderr
