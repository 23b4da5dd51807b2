"""`--variant` on every command that reads one recipe: a matrix recipe is many recipes, and each of
these commands either picks one with it or refuses with the fix. Doctor, status and bench find the
run of the variant named; no engine is started (the runs here are state files and this process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from recipectl.cli import app
from recipectl.runs import processes as procs
from recipectl.runs.state import ProcessState, RunState, new_run_dir

from .e2e_support import LOCAL_RECIPE

VARIANTS = ("launch-stop-grace-s-2", "launch-stop-grace-s-3")


@pytest.fixture
def matrix_recipe(tmp_path, monkeypatch) -> Path:
    """The local recipe with a two-value matrix, its runs kept under tmp_path."""
    monkeypatch.setenv("RECIPECTL_RUN_DIR", str(tmp_path / "runs"))
    text = LOCAL_RECIPE.read_text()
    path = tmp_path / "matrix.yaml"
    path.write_text(text + "\nmatrix:\n  launch.stop_grace_s: [2, 3]\n")
    return path


def _run_of(name: str, root: Path, recipe: Path, url: str | None = None) -> RunState:
    """A run state of `name` whose one process is this test process (alive, and ours by start time)."""
    run_id, d = new_run_dir(root, name)
    pid = os.getpid()
    ps = ProcessState(
        name="prefill-0",
        kind="prefill",
        host="127.0.0.1",
        port=None,
        url=url,
        log=str(d / "p.log"),
        argv=["pytest"],
        env={},
        pid=pid,
        start_time=procs.proc_start_time(pid),
    )
    state = RunState(
        run_id=run_id, recipe_name=name, recipe_path=str(recipe), recipe_hash="0", run_dir=str(d), processes=[ps]
    )
    state.save()
    return state


@pytest.mark.parametrize(
    "argv",
    [["show"], ["render"], ["launch"], ["plan"], ["doctor"], ["bench", "run"], ["status"], ["stop"], ["logs"], ["top"]],
)
def test_every_command_that_reads_one_recipe_takes_variant(argv):
    r = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--variant" in r.output, r.output


def test_doctor_refuses_a_matrix_recipe_without_variant_and_names_the_option(matrix_recipe, recipectl_cli):
    r = recipectl_cli("doctor", str(matrix_recipe), "--no-env", "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    assert "expands into 2 recipes" in r.stderr and "--variant NAME" in r.stderr, r.stderr


def test_doctor_accepts_a_variant_and_rejects_one_the_matrix_lacks(matrix_recipe, recipectl_cli):
    r = recipectl_cli("doctor", str(matrix_recipe), "--variant", VARIANTS[1], "--no-env", "--format", "json")
    assert r.returncode == 0, r.stderr
    checks = json.loads(r.stdout)["checks"]
    assert [(c["name"], c["status"]) for c in checks] == [("deployment", "skip")]  # nothing runs: nothing checked
    r = recipectl_cli("doctor", str(matrix_recipe), "--variant", "launch-stop-grace-s-9", "--no-env")
    assert r.returncode == 2 and "no variant 'launch-stop-grace-s-9'" in r.stderr
    assert VARIANTS[0] in r.stderr  # the fix lists the variants there are
    r = recipectl_cli("doctor", "--variant", VARIANTS[0], "--no-env")
    assert r.returncode == 2 and "no recipe was given" in r.stderr


def test_doctor_checks_the_run_of_the_variant_it_was_given(matrix_recipe, tmp_path):
    from recipectl.commands.doctor import resolve_targets
    from recipectl.validate import load_variant

    root = tmp_path / "runs"
    base = load_variant(str(matrix_recipe), VARIANTS[0]).recipe.name.rsplit(".", 1)[0]
    for i, v in enumerate(VARIANTS):
        _run_of(f"{base}.{v}", root, matrix_recipe, url=f"http://127.0.0.1:{9 + i}")
    for i, v in enumerate(VARIANTS):
        recipe = load_variant(str(matrix_recipe), v).recipe
        t = resolve_targets(recipe, str(matrix_recipe), None, None, [], [])
        assert t.prefill == [f"http://127.0.0.1:{9 + i}"], (v, t)


def test_status_stop_and_logs_find_the_variants_run(matrix_recipe, tmp_path, recipectl_cli):
    root = tmp_path / "runs"
    base = "local-tiny-hybrid"
    states = {v: _run_of(f"{base}.{v}", root, matrix_recipe) for v in VARIANTS}
    for v in VARIANTS:
        r = recipectl_cli("status", str(matrix_recipe), "--variant", v, "--format", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["run_id"] == states[v].run_id
    r = recipectl_cli("status", str(matrix_recipe))
    assert r.returncode == 2 and "--variant NAME" in r.stderr
    # --variant names a variant of a recipe file: with a run id (or nothing) it is a usage error
    for argv in (["status", states[VARIANTS[0]].run_id], ["status"], ["logs"], ["stop"]):
        r = recipectl_cli(*argv, "--variant", VARIANTS[0])
        assert r.returncode == 2 and "--variant picks one variant of a matrix recipe file" in r.stderr, (argv, r.stderr)
    Path(states[VARIANTS[1]].processes[0].log).write_text("one line\n")
    r = recipectl_cli("logs", "--run", str(matrix_recipe), "--variant", VARIANTS[1])
    assert r.returncode == 0 and r.stdout == "one line\n", r.stderr


def test_bench_takes_variant(matrix_recipe, recipectl_cli):
    """Without --variant a matrix recipe is refused; with it bench looks for that variant's run."""
    r = recipectl_cli("bench", str(matrix_recipe))
    assert r.returncode == 2 and "--variant NAME" in r.stderr
    for argv in (["bench"], ["bench", "run"]):
        r = recipectl_cli(*argv, str(matrix_recipe), "--variant", VARIANTS[0])
        assert r.returncode == 2 and f"local-tiny-hybrid.{VARIANTS[0]}" not in r.stdout
        assert "no run found" in r.stderr, r.stderr


def test_a_variant_is_named_by_whole_labels_and_an_ambiguous_or_empty_one_is_refused(tmp_path):
    """--variant 4 took prefill-endpoints-14 (a bare suffix), and a label two variants end with
    took the first of them; an empty --variant (an unset $V) took the first variant."""
    from recipectl.errors import RecipectlError
    from recipectl.validate import load_variant

    base = (Path(__file__).resolve().parent.parent / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml").read_text()
    text = base.replace(
        "prefill.endpoints: [4, 5, 6, 7, 8]", "prefill.endpoints: [14, 4]\n  decode.max_num_seqs: [256, 512]"
    )
    assert text != base
    path = tmp_path / "m.yaml"
    path.write_text(text)
    name = "qwen3.5-397b-nvfp4-gb200-pd"
    chosen = load_variant(str(path), "prefill-endpoints-4.decode-max-num-seqs-512")
    assert chosen.recipe.name == f"{name}.prefill-endpoints-4.decode-max-num-seqs-512"
    assert load_variant(str(path), chosen.recipe.name).recipe.name == chosen.recipe.name
    for given in ("4", "", "endpoints-4.decode-max-num-seqs-512"):
        with pytest.raises(RecipectlError, match="no variant"):
            load_variant(str(path), given)
    with pytest.raises(RecipectlError, match="names 2 variants") as e:
        load_variant(str(path), "decode-max-num-seqs-512")
    assert f"{name}.prefill-endpoints-14.decode-max-num-seqs-512" in e.value.fix
    # a value with a dot in it: "9" is no label of decode-gpu-memory-utilization-0.9
    dotted = tmp_path / "d.yaml"
    dotted.write_text(base.replace("prefill.endpoints: [4, 5, 6, 7, 8]", "decode.gpu_memory_utilization: [0.9, 0.85]"))
    assert load_variant(str(dotted), "decode-gpu-memory-utilization-0.9").recipe.decode.gpu_memory_utilization == 0.9
    for given in ("9", "85", "0.9"):
        with pytest.raises(RecipectlError, match="no variant"):
            load_variant(str(dotted), given)


def test_a_matrix_value_set_under_an_alias_reaches_only_its_own_role(tmp_path):
    """prefill.env and decode.env as one YAML anchor and its alias: a matrix key under prefill.env
    set decode's variable too (the variants' copy kept the alias's sharing), so decode ran with
    prefill's UCX transports."""
    from recipectl.validate import load_variant

    base = LOCAL_RECIPE.read_text()
    own = (
        "  env:\n    VLLM_SSM_CONV_STATE_LAYOUT: DS # vLLM's CPU platform picks DS itself; "
        "stated so the recipe ports to GPUs\n"
    )
    shared = "  env:\n    VLLM_SSM_CONV_STATE_LAYOUT: DS\n"
    assert own in base and shared in base
    text = base.replace(own, "  env: &roleenv {VLLM_SSM_CONV_STATE_LAYOUT: DS}\n").replace(shared, "  env: *roleenv\n")
    text += "\nmatrix:\n  prefill.env.UCX_TLS: [rc, tcp]\n"
    path = tmp_path / "aliased.yaml"
    path.write_text(text)
    for tls in ("rc", "tcp"):
        recipe = load_variant(str(path), f"env-UCX_TLS-{tls}".replace("_", "-")).recipe
        assert recipe.prefill.env.get("UCX_TLS") == tls
        assert "UCX_TLS" not in recipe.decode.env, recipe.decode.env


def test_a_list_or_mapping_valued_matrix_key_names_each_variant_by_its_words(tmp_path):
    """A matrix over extra_args (lists) made the variant names `...-['--foo', '1']`, which cannot name
    a run: validate refused every variant (SCH001). Each is now named by its value's words, or, where
    two values' words are the same or one has none, by its position in the list."""
    from recipectl.validate import load_variant

    base = LOCAL_RECIPE.read_text()
    path = tmp_path / "lists.yaml"
    path.write_text(
        base
        + '\nmatrix:\n  prefill.extra_args: [["--max-num-seqs", "8"], ["--max-num-seqs=16"]]\n'
        + "  decode.env: [{UCX_TLS: tcp}, {UCX_TLS: 'rc,tcp'}]\n"
    )
    chosen = load_variant(str(path), "prefill-extra-args-max-num-seqs-8.decode-env-UCX-TLS-rc-tcp")
    assert chosen.recipe.prefill.extra_args == ["--max-num-seqs", "8"]
    assert chosen.recipe.decode.env["UCX_TLS"] == "rc,tcp"
    assert load_variant(str(path), "prefill-extra-args-max-num-seqs-16.decode-env-UCX-TLS-tcp").recipe.name.endswith(
        "max-num-seqs-16.decode-env-UCX-TLS-tcp"
    )
    # words another value has already, or none at all: by position; a scalar a name holds as written
    same = tmp_path / "same.yaml"
    same.write_text(base + "\nmatrix:\n  decode.env.X_PATH: ['a b', 'a/b', '--', '', 'x']\n")
    got = {
        label: load_variant(str(same), f"env-X-PATH-{label}").recipe.decode.env["X_PATH"]
        for label in ("a-b", "value-2", "--", "", "x")
    }
    assert got == {"a-b": "a b", "value-2": "a/b", "--": "--", "": "", "x": "x"}


def test_a_scalars_name_is_what_it_was_whatever_the_other_values_are(tmp_path):
    """An empty value beside "1" made every value of the key named by its position: `env-FOO-1`,
    the name "1" had, then chose FOO="" (a --variant or lock that named it took the other variant)."""
    from recipectl.validate import load_variant

    path = tmp_path / "empty.yaml"
    path.write_text(LOCAL_RECIPE.read_text() + "\nmatrix:\n  decode.env.FOO: ['', '1']\n")
    assert load_variant(str(path), "env-FOO-1").recipe.decode.env["FOO"] == "1"
    assert load_variant(str(path), "env-FOO-").recipe.decode.env["FOO"] == ""


def test_variants_named_alike_or_too_long_are_refused_with_the_key_to_change(tmp_path, recipectl_cli):
    """Two keys whose labels join to one name (env.A x env.B), and values whose words make a name
    past a file name's length (two --compilation-config JSONs: `lock --variant` died on
    "File name too long")."""
    alike = tmp_path / "alike.yaml"
    alike.write_text(
        LOCAL_RECIPE.read_text() + "\nmatrix:\n  decode.env.A: ['1.env-B-2', '1']\n  decode.env.B: ['3', '2.env-B-3']\n"
    )
    r = recipectl_cli("validate", str(alike))
    assert r.returncode == 2 and "names two variants" in r.stdout, r.stdout + r.stderr
    long = tmp_path / "long.yaml"
    words = [f"w{i}" for i in range(60)]
    long.write_text(
        LOCAL_RECIPE.read_text()
        + f"\nmatrix:\n  prefill.extra_args: [{words!r}, {words[::-1]!r}]\n"
        + f"  decode.extra_args: [{words!r}, {words[1:]!r}]\n"
    )
    r = recipectl_cli("expand", str(long), "-f", "names")
    assert r.returncode == 0 and max(map(len, r.stdout.split())) < 100, r.stdout + r.stderr
    assert "prefill-extra-args-value-1.decode-extra-args-value-2" in r.stdout  # words past 40: positions
    longer = tmp_path / "longer.yaml"
    longer.write_text(LOCAL_RECIPE.read_text() + f"\nmatrix:\n  decode.env.{'X' * 190}: ['1', '2']\n")
    r = recipectl_cli("validate", str(longer))
    assert r.returncode == 2 and "at most 200" in r.stdout, r.stdout + r.stderr


def test_validate_accepts_a_matrix_over_extra_args(tmp_path, recipectl_cli):
    path = tmp_path / "lists.yaml"
    path.write_text(LOCAL_RECIPE.read_text() + '\nmatrix:\n  prefill.extra_args: [["--max-num-seqs", "8"], []]\n')
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SCH001" not in r.stdout
