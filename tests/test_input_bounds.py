"""Small inputs that once cost gigabytes, minutes or an internal error: each is now a finding or a
clean error (exit 1 or 2), within stated bounds.

The CLI cases run in a subprocess under RLIMIT_AS = AS_LIMIT_MB of address space and RLIMIT_CPU,
and a wall-clock timeout (a FIFO once blocked forever): `cpu_cores: ['0-100000000']` (14 bytes)
took 1.2 GB, 9,000 `ignore:` entries 9.5 s, `/dev/zero` as --config 1.9 GB, a FIFO as --config or
as a parent recipectl.toml hung. JSON a user hands recipectl is parsed within a depth (32) and a
size; a plan whose role holds no request says so, where it divided by zero.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipectl.errors import RecipectlError
from recipectl.fileio import JSON_MAX_DEPTH, JsonRefused, parse_json
from recipectl.loader import load_text

ROOT = Path(__file__).resolve().parent.parent
LOCAL = (ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml").read_text()
H200 = (ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-2gpu-pd.yaml").read_text()
AS_LIMIT_MB = 1536  # address space of one CLI process (the interpreter and its imports take ~400)
CPU_LIMIT_S = 3.0  # CPU of one CLI process, start-up (~0.5 s) included
WALL_LIMIT_S = 60.0  # a hang fails here, not at CI's limit


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _run(args: list[str], cwd: Path) -> tuple[int, float, str]:
    """`recipectl ARGS` under the bounds: (exit code, CPU seconds, stdout + stderr)."""

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_MB << 20, AS_LIMIT_MB << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (20, 20))

    proc = subprocess.Popen(
        [sys.executable, "-m", "recipectl", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=limits,
        env={**os.environ, "TMPDIR": str(cwd), "COLUMNS": "200"},
    )
    try:
        out, _ = proc.communicate(timeout=WALL_LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"recipectl {' '.join(args)} ran past {WALL_LIMIT_S} s: {out.decode()[-500:]}") from None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # cumulative: the caller takes differences
    return proc.returncode, usage.ru_utime + usage.ru_stime, out.decode(errors="replace")


def _bounded(args: list[str], cwd: Path) -> tuple[int, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code, cpu, out = _run(args, cwd)
    cpu -= before.ru_utime + before.ru_stime
    assert cpu < CPU_LIMIT_S, (args, cpu)
    assert "Traceback" not in out and "internal error" not in out, out[-2000:]
    return code, out


# ------------------------------------------------------------------------------------ JSON
@pytest.mark.parametrize(
    "text, refused",
    [
        ("[" * 1000 + "]" * 1000, "nested too deeply (more than 32 levels)"),
        ("[" * 60_000, "nested too deeply"),
        ("[" * (JSON_MAX_DEPTH + 1) + "]" * (JSON_MAX_DEPTH + 1), "nested too deeply"),
        ('{"a": ' * 40 + "1" + "}" * 40, "nested too deeply"),
        ('"' + "x" * (65 << 10) + '"', "larger than 64 KiB"),
        ("{not json", "not valid JSON"),
    ],
)
def test_json_past_the_bounds_is_refused_quickly(text, refused):
    t0 = time.process_time()
    with pytest.raises(JsonRefused, match=re.escape(refused)):
        parse_json(text, max_bytes=64 << 10)
    assert time.process_time() - t0 < 0.5


def test_json_within_the_bounds_parses_and_brackets_in_strings_do_not_count():
    nested = "[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH
    assert parse_json(nested) is not None
    tricky = json.dumps({"a": "[" * 500 + '\\"' + "{" * 500, "b": [1, {"c": "]]]"}]})
    assert parse_json(tricky) == json.loads(tricky)


@pytest.mark.parametrize("flag", ["--speculative-config", "--kv-transfer-config"])
def test_deep_json_in_extra_args_is_a_finding(tmp_path, flag):
    """A recipe's extra_args flag of 1,000 `[` was a RecursionError (exit 3) in validate."""
    recipe = tmp_path / "r.yaml"
    deep = "[" * 1000 + "]" * 1000
    recipe.write_text(_edit(LOCAL, "  cpu_cores: ['0']", f"  extra_args: ['{flag}', '{deep}']\n  cpu_cores: ['0']"))
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code in (1, 2), out
    assert flag in out and "nested too deeply" in out and deep not in out, out


# ---------------------------------------------------------------------------------- cpu_cores
def test_a_huge_core_range_is_a_schema_error_not_gigabytes(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_edit(LOCAL, "cpu_cores: ['0']", "cpu_cores: ['0-100000000']"))
    line = LOCAL[: LOCAL.index("cpu_cores: ['0']")].count("\n") + 1
    for command in ("validate", "plan", "render"):
        code, out = _bounded([command, str(recipe)], tmp_path)
        assert code == 2, (command, out)
        assert f"r.yaml:{line}:" in out and "CPU ids are below 65,536" in out and "[prefill.cpu_cores]" in out, out


@pytest.mark.parametrize(
    "cores, phrase",
    [
        ("'0-65536'", "CPU 65536"),
        ("'" + "9" * 900 + "'", "CPU 999999999999..."),
        ("'" + "0," * 600 + "1'", "a core list of 1,201 characters"),
    ],
)
def test_core_lists_are_bounded(cores, phrase):
    result = load_text(_edit(LOCAL, "cpu_cores: ['0']", f"cpu_cores: [{cores}]"), "r.yaml")
    assert not result.ok and phrase in result.diagnostics[0].message, result.diagnostics
    assert result.diagnostics[0].path == "prefill.cpu_cores"


def test_the_core_lists_of_a_role_name_at_most_a_million_cpus():
    many = _edit(LOCAL, "cpu_cores: ['0']", "endpoints: 17\n  cpu_cores: [" + ", ".join(["'0-65535'"] * 17) + "]")
    result = load_text(many, "r.yaml")
    assert not result.ok and "name more than 1,048,576 CPUs" in result.diagnostics[0].message
    assert load_text(_edit(LOCAL, "cpu_cores: ['0']", "cpu_cores: ['0-65535']"), "r.yaml").ok


def test_overlapping_ranges_expand_once():
    from recipectl.topology import parse_cores

    assert parse_cores("0-3,2-5, 9") == {0, 1, 2, 3, 4, 5, 9}
    t0 = time.process_time()
    assert len(parse_cores(",".join(["0-65535"] * 100))) == 65536
    assert time.process_time() - t0 < 0.5
    for bad in ("3-1", "auto", "0-65536", "1,,2"):
        with pytest.raises(ValueError):
            parse_cores(bad)


# ------------------------------------------------------------------------------------- ignore
def test_nine_thousand_ignore_entries_are_refused_fast(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(LOCAL + "ignore:\n" + "".join(f"  X{i:05d}: because\n" for i in range(9000)))
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code == 2 and "9,000 ignore: entries; at most 256" in out and "[ignore]" in out, out[-2000:]


def test_the_most_ignore_entries_allowed_are_checked_fast(tmp_path):
    """256 entries that name no rule: each is OPS006's warning, found without minutes of
    did-you-mean (once computed twice per entry)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(LOCAL + "ignore:\n" + "".join(f"  X{i:05d}: because\n" for i in range(256)))
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code == 0 and out.count("OPS006 warning") == 256, out[-2000:]


# ---------------------------------------------------------------------------------------- paths
@pytest.mark.parametrize(
    "path, phrase",
    [
        ("/" + "a" * 5000, "a path of 5,001 bytes: the system takes at most 4,095"),
        ("/models/" + "b" * 300, "a name of 300 bytes in the path: the system takes at most 255 per name"),
    ],
)
def test_a_path_the_system_cannot_open_is_a_schema_error(recipectl_in_process, tmp_path, path, phrase):
    """A 5,000-character model path was an OSError (File name too long) from the model lookup."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_edit(LOCAL, "path: ~/.cache/recipectl/models/qwen3next-tiny", f"path: {path}"))
    line = LOCAL[: LOCAL.index("path: ~/.cache")].count("\n") + 1
    for command in ("validate", "plan", "render"):
        code, out, err = recipectl_in_process(command, str(recipe))
        assert code == 2 and phrase in out + err and f"r.yaml:{line}:" in out + err, (command, out, err)
        assert "[model.path]" in out + err


def test_long_venv_and_run_dir_are_schema_errors():
    for old, new, field in (
        ("launch:\n", "launch:\n  run_dir: " + "r" * 4200 + "\n", "launch.run_dir"),
        ("venv: ~/.cache/recipectl/engine", "venv: /" + "v" * 256, "engine.venv"),
    ):
        result = load_text(_edit(LOCAL, old, new), "r.yaml")
        assert not result.ok and result.diagnostics[0].path == field, result.diagnostics


# ----------------------------------------------------------------------------------------- plan
def test_plan_says_when_a_role_cannot_hold_one_request(recipectl_in_process, tmp_path):
    """An 80B model at TP1 on one H100: the weights take the memory, the cache holds nothing, and
    plan divided by zero (exit 3). Now it says which role, why and what to change; exit 1."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_edit(_edit(H200, "spec: Qwen3.5-35B-A3B", "spec: Qwen3-Next-80B-A3B"), "gpu: H200", "gpu: H100"))
    code, out, err = recipectl_in_process("plan", str(recipe))
    assert code == 1, out + err
    text = " ".join(out.split())
    assert "decode cannot hold one request" in text and "prefill cannot hold one request" in text, text
    assert "fix: more tensor parallel per endpoint (decode: {parallel: TP4} or more)" in text, text
    code, out, err = recipectl_in_process("plan", str(recipe), "--format", "json")
    assert code == 1, err
    report = json.loads(out)
    for role in ("prefill", "decode"):
        assert report["roles"][role]["holds_one_request"] is False
        assert report["roles"][role]["ssm_bf16_vs_fp32"]["concurrency_ratio"] is None
    code, out, err = recipectl_in_process("plan", str(ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-2gpu-pd.yaml"))
    assert code == 0 and "cannot hold" not in out, out + err


@pytest.mark.parametrize(
    "edit, phrase",
    [
        (("decode:\n", "decode:\n  kv_cache_dtype: word\n"), "unsupported dtype 'word'"),
        (("decode:\n", "decode:\n  parallel: TP7\n"), "not divisible by tensor parallel size 7"),
    ],
)
def test_plan_refuses_what_it_cannot_size(recipectl_in_process, tmp_path, edit, phrase):
    """The planner's refusals (a cache dtype it has no size for, a TP that splits no head) were
    internal errors (ValueError, exit 3); they are the recipe's fault: exit 2, said plainly."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_edit(H200, *edit))
    code, out, err = recipectl_in_process("plan", str(recipe))
    assert code == 2 and f"{recipe}: cannot plan this recipe: " in err and phrase in err, out + err


# ------------------------------------------------------------------------------- config files
def _recipe_in(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    recipe = directory / "r.yaml"
    recipe.write_text(LOCAL)
    return recipe


def test_a_fifo_or_a_device_as_config_is_refused(tmp_path):
    recipe = _recipe_in(tmp_path / "p")
    fifo = tmp_path / "settings.toml"
    os.mkfifo(fifo)
    for config in (fifo, Path("/dev/zero")):
        code, out = _bounded(["validate", str(recipe), "--config", str(config)], tmp_path)
        assert code == 2 and "cannot read the settings: not a regular file" in out, out


def test_a_fifo_recipectl_toml_above_the_recipe_is_refused_not_waited_on(tmp_path):
    recipe = _recipe_in(tmp_path / "project" / "recipes")
    os.mkfifo(tmp_path / "project" / "recipectl.toml")
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code == 2 and "recipectl.toml: cannot read the settings: not a regular file" in out, out


def test_a_fifo_pyproject_is_passed_over(tmp_path):
    """A pyproject.toml is recipectl's only with a [tool.recipectl] table: one that cannot be
    read is not this project's settings, and is passed over without waiting on it."""
    recipe = _recipe_in(tmp_path / "project")
    os.mkfifo(tmp_path / "project" / "pyproject.toml")
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code == 0, out


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("select = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("# " + "x" * (2 << 20) + "\n", "larger than 1 MiB"),
    ],
)
def test_a_config_past_the_bounds_is_refused(tmp_path, text, phrase):
    recipe = _recipe_in(tmp_path / "project")
    (tmp_path / "project" / "recipectl.toml").write_text(text)
    code, out = _bounded(["validate", str(recipe)], tmp_path)
    assert code == 2 and phrase in out, out[-2000:]


# -------------------------------------------------------------------------------- bench summaries
def test_bench_compare_reads_summaries_within_bounds(tmp_path):
    from recipectl.commands.bench import bench_compare

    good = tmp_path / "good"
    good.mkdir()
    (good / "summary.json").write_text(json.dumps({"levels": [{"concurrency": 1, "tps_per_gpu": 10.0}]}))
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "summary.json")
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "summary.json").write_text("[" * 100_000)
    typed = tmp_path / "typed"
    typed.mkdir()
    (typed / "summary.json").write_text(json.dumps({"levels": [{"concurrency": "one", "tps_per_gpu": "x"}]}))
    for bad, phrase in ((fifo, "not a regular file"), (deep, "nested too deeply"), (typed, "not a bench summary")):
        with pytest.raises(RecipectlError, match=phrase):
            bench_compare(str(good), str(bad), as_json=True)


def test_a_nul_byte_in_an_imported_model_path_is_a_value_not_a_crash(recipectl_in_process, tmp_path):
    """A NUL byte in `vllm serve`'s model argument made the model lookup's os.stat raise ValueError
    (an internal error); no file can have such a name, so it is looked up as missing."""
    kv = '{"kv_connector":"NixlConnector","kv_role":"%s"}'
    script = tmp_path / "pair.sh"
    script.write_text(
        "".join(
            f"vllm serve 'x\x00y/Qwen/Qwen3.5-35B-A3B' --port {port} --kv-transfer-config '{kv % role}'\n"
            for port, role in ((8000, "kv_producer"), (8001, "kv_consumer"))
        )
    )
    code, out, err = recipectl_in_process("import", str(script))
    assert code in (0, 1, 2) and "internal error" not in err, err
    assert "connector: NixlConnector" in out, out
