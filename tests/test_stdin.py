"""`recipectl validate -`: one recipe from standard input, named by --stdin-filename in findings
and in the search for project settings; the fast path and the Typer app read it alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"


def _validate(*args: str, input: bytes, module: str = "recipectl", cwd: Path = ROOT) -> tuple[int, str, str]:
    r = subprocess.run(
        [sys.executable, "-m", module, "validate", *args], input=input, capture_output=True, cwd=cwd, timeout=120
    )
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def _broken() -> bytes:
    data = yaml.safe_load(GB200.read_text())
    data["decode"]["env"].pop("VLLM_SSM_CONV_STATE_LAYOUT")  # HYB001
    return yaml.safe_dump(data, sort_keys=False).encode()


def test_a_clean_recipe_from_stdin():
    rc, out, err = _validate("-", input=LOCAL.read_bytes())
    assert (rc, err) == (0, "") and out.startswith("-: ok (local-tiny-hybrid)")


def test_findings_name_the_stdin_filename_on_both_paths():
    text = _broken()
    rc, out, _ = _validate("-", "-f", "json", input=text)
    body = json.loads(out)
    assert rc == 1 and body["files"][0]["file"] == "-"
    assert {f["file"] for f in body["files"][0]["findings"]} == {"-"}
    fast = _validate("-", "--stdin-filename", "deploy/prod.yaml", input=text)
    full = _validate("-", "--stdin-filename", "deploy/prod.yaml", input=text, module="recipectl.cli")
    assert fast == full
    rc, out, _ = fast
    assert rc == 1 and "deploy/prod.yaml:" in out and "HYB001 error" in out and "\n-:" not in out


def test_settings_are_found_from_the_stdin_filename(tmp_path):
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "recipectl.toml").write_text('ignore = ["HYB001"]\n')
    rc, out, _ = _validate("-", "--stdin-filename", str(tmp_path / "team" / "r.yaml"), input=_broken())
    assert rc == 0 and "3 rule(s) ignored" in out and "HYB001 (ignore in " in out and "team/recipectl.toml" in out
    rc, _, _ = _validate("-", input=_broken())  # no name: the current directory's settings (none here)
    assert rc == 1


def test_stdin_with_files_and_bad_input(tmp_path):
    rc, out, _ = _validate(str(LOCAL), "-", input=_broken())
    assert rc == 1 and "2 file(s)" in out and out.startswith(f"{LOCAL}: ok")
    rc, out, err = _validate("-", "-", input=b"")
    assert rc == 2 and "more than once" in err
    rc, out, _ = _validate("-", input=b"version: 1\nname: [unclosed\n")
    assert rc == 2 and "-:" in out and "YAML syntax error" in out
    rc, out, _ = _validate("-", "--stdin-filename", "x.yaml", input=b"name: \xff\xfe\n")
    assert rc == 2 and "x.yaml" in out and "SCH000" in out and "cannot read standard input" in out
