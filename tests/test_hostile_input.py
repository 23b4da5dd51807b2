"""A recipe is data, never code: hostile input ends in a report (exit 0, 1 or 2), quickly.

One regression case per class an adversarial review found (each once ended in "internal error",
exit 3, or ran for minutes), run through the loader in-process and a handful through the real CLI
under CPU and memory limits; then a seeded mutator of the shipped recipes, a few thousand cases.
"""

from __future__ import annotations

import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipectl.loader import load_text
from recipectl.secretscan import pure_reference, redact_env
from recipectl.validate import validate_file

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted(ROOT.glob("recipes/**/*.yaml"))
LOCAL = (ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml").read_text()

CPU_LIMIT_S = 2.0  # per input
MEMORY_LIMIT_MB = 500  # per CLI run (resident)


def _local(old: str, new: str) -> str:
    assert old in LOCAL, old
    return LOCAL.replace(old, new, 1)


def _bomb(levels: int = 9) -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# class -> (recipe text, a phrase the first error must contain)
REGRESSIONS: dict[str, tuple[str, str]] = {
    "alias bomb": (_bomb(), "expands to more than"),
    "recursive alias": ("version: 1\nname: &a [*a]\n", "recursive alias"),
    "deep flow nesting": ("a: " + "[" * 1000 + "]" * 1000 + "\n", "nesting depth"),
    "deep block nesting": (
        "".join("  " * i + f"k{i}:\n" for i in range(1000)) + "  " * 1000 + "x: 1\n",
        "nesting depth",
    ),
    "nesting past the limit libyaml takes": ("a: " + "[" * 200 + "]" * 200 + "\n", "nested deeper than 64"),
    "!!bool maybe": (_local("enforce_eager: true", "enforce_eager: !!bool maybe"), "not a valid !!bool"),
    "!!int abc": (_local("port: 8100", "port: !!int abc"), "not a valid !!int"),
    "custom tag": (_local("port: 8100", "port: !python/object:os.system ls"), "has no place in a recipe"),
    "binary tag": (_local("served_name: tiny", "served_name: !!binary aGVsbG8="), "has no place in a recipe"),
    "10**400": (_local("isl: 64", "isl: " + "9" * 400), "out of range"),
    "5000 digits (past Python's int limit)": (_local("isl: 64", "isl: " + "9" * 5000), "not a valid !!int"),
    "10**400 as a string": (_local("isl: 64", f"isl: '{'9' * 400}'"), "less than or equal"),
    "huge token count": (
        _local("max_num_batched_tokens: 4096", f"max_num_batched_tokens: '{'9' * 40}K'"),
        "less than or equal",
    ),
    ".inf timeout": (_local("ready_timeout_s: 900", "ready_timeout_s: .inf"), "not a finite number"),
    ".nan timeout": (_local("stop_grace_s: 15", "stop_grace_s: .nan"), "not a finite number"),
    "'inf' timeout as a string": (_local("stop_grace_s: 15", "stop_grace_s: 'inf'"), "finite number"),
    "lone surrogate in a name": (_local("name: local-tiny-hybrid", 'name: "x\\udc80"'), "not valid Unicode"),
    "lone surrogate in a key": (_local("  UCX_NET_DEVICES: lo", '  "\\ud800": lo'), "not valid Unicode"),
    "7-key matrix": (
        LOCAL
        + "matrix:\n"
        + "".join(f"  prefill.env.X{i}: [{', '.join(repr(str(j)) for j in range(10))}]\n" for i in range(7)),
        "the matrix makes 10,000,000 recipes",
    ),
    "matrix key that is not a path": (LOCAL + "matrix:\n  7: [1, 2]\n", "not a dotted field path"),
    "complex key": (_local("version: 1", "version: 1\n? [a, b]\n: c"), "plain name"),
    "top-level list": ("- 1\n- 2\n", "must be a mapping"),
    "1,024 endpoints of DP 4,096 on one host": (
        re.sub(r"  cpu_cores: \['[01]'\].*\n", "  endpoints: 1024\n  parallel: DP4096\n", LOCAL),
        "",
    ),
}


def _first_error(result) -> str:
    return next((d.message for d in result.diagnostics), "")


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_hostile_input_is_a_report_in_process(name):
    text, phrase = REGRESSIONS[name]
    t0 = time.process_time()
    result = load_text(text, "hostile.yaml")
    if result.ok:
        from recipectl.rules import check_recipe

        for loaded in result.recipes:
            check_recipe(loaded)
    assert time.process_time() - t0 < CPU_LIMIT_S, name
    if phrase:
        assert not result.ok
        assert phrase in _first_error(result), [d.message for d in result.diagnostics]
        d = result.diagnostics[0]
        assert d.file == "hostile.yaml" and d.code.startswith("SCH")


def test_every_refusal_has_a_line_and_a_field(tmp_path):
    for name in ("!!bool maybe", "!!int abc", "10**400", ".inf timeout", "lone surrogate in a name", "custom tag"):
        (d, *_) = load_text(REGRESSIONS[name][0], "r.yaml").diagnostics
        assert d.line and d.path, (name, d)


def _run_limited(args: list[str], cwd: Path, timeout: float = 60) -> tuple[int, float, float, str]:
    """Run the CLI; (exit code, CPU seconds, peak resident MB, stderr) of that process alone."""

    def limits():
        resource.setrlimit(resource.RLIMIT_CPU, (10, 10))  # a hang is a failure, not a stuck CI job

    proc = subprocess.Popen(
        [sys.executable, "-m", "recipectl", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=limits,
        env={**os.environ, "RECIPECTL_RUN_DIR": str(cwd / "runs")},
    )
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stderr


CLI_CASES = [
    "alias bomb",
    "recursive alias",
    "deep flow nesting",
    "!!bool maybe",
    "10**400",
    ".inf timeout",
    "7-key matrix",
    "lone surrogate in a name",
]


@pytest.mark.parametrize("name", CLI_CASES)
def test_hostile_input_through_the_cli(tmp_path, name):
    path = tmp_path / "hostile.yaml"
    path.write_text(REGRESSIONS[name][0], errors="surrogatepass")
    for command in ("validate", "plan", "render"):
        rc, cpu, rss, err = _run_limited([command, str(path)], tmp_path)
        assert rc == 2, (name, command, rc, err)
        assert "Traceback" not in err and "internal error" not in err
        # the interpreter and imports alone take ~0.3 s of CPU on a 2-core host
        assert cpu < CPU_LIMIT_S + 1.0, (name, command, cpu)
        assert rss < MEMORY_LIMIT_MB, (name, command, rss)


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "r.yaml"
    os.mkfifo(fifo)
    rc, _, _, err = _run_limited(["plan", str(fifo)], tmp_path, timeout=20)
    assert rc == 2 and "not a regular file" in err
    report, _ = validate_file(fifo)
    assert not report.valid and "not a regular file" in report.diagnostics[0].message


def test_a_directory_or_an_oversized_file_is_refused(tmp_path):
    report, _ = validate_file(tmp_path)
    assert not report.valid and "a directory" in report.diagnostics[0].message
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    report, _ = validate_file(big)
    assert not report.valid and "larger than" in report.diagnostics[0].message


def test_a_directory_whose_entries_vanish_while_it_is_walked(recipectl_in_process, tmp_path, monkeypatch):
    """A directory gone between its listing and its walk (a process of /proc ending) is passed
    over; it had been a FileNotFoundError (exit 3)."""
    (tmp_path / "recipes" / "gone").mkdir(parents=True)
    (tmp_path / "recipes" / "kept").mkdir()
    (tmp_path / "recipes" / "kept" / "r.yaml").write_text(LOCAL)
    real_scandir = os.scandir

    def scandir(path="."):
        if os.path.basename(os.fspath(path)) == "gone":
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = recipectl_in_process("validate", str(tmp_path / "recipes"))
    assert code == 0 and "kept/r.yaml: ok" in out, out + err
    (tmp_path / "recipes" / "kept" / "r.yaml").unlink()
    code, out, err = recipectl_in_process("validate", str(tmp_path / "recipes"))
    assert code == 2 and "no *.yaml recipes in this directory" in err, out + err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="a Linux /proc")
def test_validate_proc_is_a_clean_refusal(recipectl_in_process):
    code, out, err = recipectl_in_process("validate", "/proc")
    assert code == 2 and "/proc: no *.yaml recipes in this directory" in err, out + err


def _model_dir(tmp_path: Path, config: str) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(config)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_local("path: ~/.cache/recipectl/models/qwen3next-tiny", "path: ./m"))
    return recipe


@pytest.mark.parametrize(
    "config, phrase",
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "is not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_an_unreadable_model_config_is_a_schema_error(tmp_path, config, phrase):
    report, _ = validate_file(_model_dir(tmp_path, config))
    assert not report.valid
    (d,) = report.diagnostics
    assert phrase in d.message and d.path == "model.path" and d.line == 14


@pytest.mark.parametrize(
    "config",
    [
        '{"architectures": "Qwen3NextForCausalLM", "text_config": 5, "layer_types": 7, "num_experts": "x"}',
        '{"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 1e400, "hidden_size": 8}',
        '{"architectures": ["X"], "num_hidden_layers": 100000000000, "hidden_size": 8, "num_attention_heads": 1,'
        ' "vocab_size": 5}',
    ],
)
def test_plan_reports_a_model_config_it_cannot_describe(recipectl_cli, tmp_path, config):
    recipe = _model_dir(tmp_path, config)
    r = recipectl_cli("plan", str(recipe))
    assert r.returncode == 2, r.stderr
    assert "config.json" in r.stderr and "[model.path]" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("value", ["1.5", "lots", "1e400", "9" * 30])
def test_plan_reports_a_kv_cache_space_vllm_cannot_read(recipectl_cli, tmp_path, value):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_local('VLLM_CPU_KVCACHE_SPACE: "1"', f'VLLM_CPU_KVCACHE_SPACE: "{value}"'))
    r = recipectl_cli("plan", str(recipe))
    assert r.returncode == 2, r.stderr
    assert "r.yaml:27:5" in r.stderr and "[engine.env.VLLM_CPU_KVCACHE_SPACE]" in r.stderr
    assert "whole number of GiB" in r.stderr


# A default that is itself a reference, 5,000 deep: each was a RecursionError (exit 3) in the
# check of what is a reference and what a literal (a credential), in every command.
DEEP_DEFAULT = "${X:-" * 5000 + "}" * 5000


def test_a_reference_nested_thousands_deep_is_a_reference():
    assert pure_reference(DEEP_DEFAULT)
    assert not pure_reference("${X:-" * 5000 + "hunter2" + "}" * 5000)  # a literal at the bottom
    assert redact_env({"HF_TOKEN": DEEP_DEFAULT}) == {"HF_TOKEN": DEEP_DEFAULT}


@pytest.mark.parametrize(
    "old, new",
    [
        ('VLLM_NO_USAGE_STATS: "1"', f"VLLM_NO_USAGE_STATS: '{DEEP_DEFAULT}'"),
        ('VLLM_NO_USAGE_STATS: "1"', f"HF_TOKEN: '{DEEP_DEFAULT}'"),
        ("--disable-circuit-breaker]", f"--disable-circuit-breaker, --api-key, '{DEEP_DEFAULT}']"),
    ],
)
def test_a_reference_nested_thousands_deep_through_the_commands(recipectl_in_process, tmp_path, old, new):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(_local(old, new))
    for argv in (["validate"], ["show"], ["plan"], ["render", "-t", "bash", "-o", str(tmp_path / "out")]):
        code, out, err = recipectl_in_process(*argv, str(recipe))
        assert code in (0, 1), (argv, code, err)
    (script,) = (tmp_path / "out").glob("*.sh")
    assert DEEP_DEFAULT in script.read_text()  # kept as written: the shell expands it


def test_a_script_with_a_reference_nested_thousands_deep_imports(recipectl_in_process, tmp_path):
    script = tmp_path / "pd.sh"
    script.write_text(
        f"export HF_TOKEN='{DEEP_DEFAULT}'\n"
        f"vllm serve Qwen/Qwen3.5-27B --port 8100 --api-key '{DEEP_DEFAULT}' --kv-transfer-config "
        '\'{"kv_connector":"NixlConnector","kv_role":"kv_producer"}\'\n'
        "vllm serve Qwen/Qwen3.5-27B --port 8200 --kv-transfer-config "
        '\'{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}\'\n'
    )
    code, out, err = recipectl_in_process("import", str(script))
    assert code == 0 and DEEP_DEFAULT in out, err


# ---------------------------------------------------------------------------------- mutator
HOSTILE_VALUES = [
    "!!bool maybe",
    "!!int abc",
    "!!float x",
    "!!null 3",
    "!foo bar",
    "!!binary aGk=",
    "!!set {a: null}",
    "!!timestamp 2024-13-45",
    "2024-01-01",
    "1:2:3:4:5:6:7:8:9",
    ".inf",
    "-.inf",
    ".nan",
    "1.0e+400",
    "1e400",
    "9" * 400,
    "-" + "9" * 25,
    "0x" + "f" * 40,
    "'" + "9" * 400 + "'",
    '"\\udc80"',
    '"\\ud800x"',
    "*nowhere",
    "&x [*x]",
    "[" * 80 + "]" * 80,
    "{a: {b: {c: {d: [1, [2, [3]]]}}}}",
    "~",
    "''",
    "[]",
    "{}",
    "'inf'",
    "'nan'",
    "'-1'",
    "0",
    "-1",
    "true",
    "'${HF_TOKEN:-hf_abcdefghijklmnopqrstuvwxyz0123}'",
    "x" * 5000,
    "DEP999999999",
    "TP0",
    "'16K'",
    "'99999999999999999999M'",
    "[1, 2, 3]",
    "? [a]\n: b",
]


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        action = rng.random()
        keyed = [i for i, ln in enumerate(lines) if ":" in ln and not ln.lstrip().startswith("#")]
        if action < 0.6 and keyed:
            i = rng.choice(keyed)
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {rng.choice(HOSTILE_VALUES)}"
        elif action < 0.7 and lines:
            del lines[rng.randrange(len(lines))]
        elif action < 0.8 and lines:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])  # a duplicate key, most of the time
        elif action < 0.85:
            lines.insert(0, _bomb(rng.randint(3, 10)).rstrip())
        elif action < 0.9:
            n = rng.randint(1, 9)
            lines.append(
                "matrix:\n"
                + "".join(
                    f"  prefill.env.K{k}: [{', '.join(str(v) for v in range(rng.randint(1, 12)))}]\n" for k in range(n)
                )
            )
        elif action < 0.95 and lines:
            cut = rng.randrange(len("\n".join(lines)) or 1)
            lines = "\n".join(lines)[:cut].splitlines()  # truncated
        else:
            i = rng.randrange(len(lines) or 1)
            lines.insert(
                i,
                " " * rng.randint(0, 6)
                + rng.choice(["- x", "? a", "&a b: c", "<<: *a", "%YAML 1.1", "---", "...", "\t: x", "key: 'unclosed"]),
            )
    return "\n".join(lines) + "\n"


MUTATIONS_PER_RECIPE = 750  # x each shipped recipe (6: 4,500 cases), seconds on a 2-core host


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_mutated_shipped_recipes_never_raise_nor_run_long(recipe):
    from recipectl.rules import check_recipe

    rng = random.Random(f"hostile-{recipe.name}")  # seeded: a failure reproduces
    base = recipe.read_text()
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slowest = (0.0, "")
    for n in range(MUTATIONS_PER_RECIPE):
        text = _mutate(base, rng)
        t0 = time.process_time()
        try:
            result = load_text(text, "m.yaml", base_dir=recipe.parent)
            for loaded in result.recipes:
                check_recipe(loaded)
        except Exception as e:  # the point of the test
            raise AssertionError(f"case {n} of {recipe.name} raised {type(e).__name__}: {e}\n{text}") from e
        cpu = time.process_time() - t0
        slowest = max(slowest, (cpu, text))
        for d in result.diagnostics:
            assert d.code and d.message
    assert slowest[0] < CPU_LIMIT_S, slowest
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024
    assert grown_mb < MEMORY_LIMIT_MB
