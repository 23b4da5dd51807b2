"""The field corpus (tests/field/): published hybrid P/D recipes in the peers' formats (srt-slurm,
Dynamo) and as vllm serve command lines, each with the findings the evidence says it should get.

Per file, written down before any rule changes:
- `bad`: what its publisher reports as broken (a peer's own known issues, an upstream issue), with
  the code and severity that must catch it. Code "*" is a rule that does not exist yet (matched by
  severity and field path).
- `expect`: the other findings it must get (what cannot be proven, deprecations, advice).
- `never`: findings it must not get (code, path): a rule broader than its source.
A recipe its publisher ran successfully has no `bad` and must have no `error` finding.

The expectations were written before the rules were changed to meet them (unknown versions warn,
VER001 is the consumer's, kv_both is deprecated not broken, runtime image tags name no vLLM
version, prefix caching on either role, FP8 KV on NVFP4, recompute on load failure). Findings
beyond `bad` + `expect` that are warnings or infos are tolerated (advice the rules may add).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from recipectl.diagnostics import Severity
from recipectl.validate import validate_file

ROOT = Path(__file__).resolve().parent.parent
FIELD = Path(__file__).parent / "field"
E, W, I = "error", "warning", "info"  # noqa: E741


@dataclass(frozen=True)
class Expect:
    file: str
    bad: tuple[tuple[str, str, str], ...] = ()  # (code or "*", severity, field path glob)
    expect: tuple[tuple[str, str, str], ...] = ()
    never: tuple[tuple[str, str], ...] = ()  # (code, field path glob)


SEED_EXPECT = (
    ("VER001", W, "decode.async_scheduling"),
    ("VER002", W, "engine.vllm_version"),
    ("CON003", W, "prefill.kv_role"),
    ("CON003", W, "decode.kv_role"),
    ("OPS002", I, "router.prefill_policy"),
)
KV_BOTH_EXPECT = (("CON003", W, "prefill.kv_role"), ("CON003", W, "decode.kv_role"))
NEVER_PREFILL_RACE = (("VER001", "prefill.*"),)
# vLLM's CI scripts: kv_both, no version pinned, async scheduling left at its default
CI_EXPECT = KV_BOTH_EXPECT + (("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling"))

CORPUS: tuple[Expect, ...] = (
    # ---------------------------------------------------------------- srt-slurm (NVIDIA/srt-slurm)
    Expect("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-8xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-6xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect(
        "srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8-v0.26.yaml",
        expect=KV_BOTH_EXPECT + (("OPS002", I, "router.prefill_policy"),),
        never=(("VER001", "*"), ("VER002", "*")),
    ),
    Expect(
        "srt-slurm/known-bad-decode-without-ds-layout.yaml",
        bad=(("HYB001", E, "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"),),
        expect=SEED_EXPECT,
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "srt-slurm/known-bad-async-scheduling-vllm-0.25.yaml",
        bad=(("VER001", E, "decode.async_scheduling"),),
        expect=KV_BOTH_EXPECT,
        never=NEVER_PREFILL_RACE,
    ),
    # vLLM 0.27.0: the decode "SSM can only have one local block" assertion is 0.23.0-0.26.x only (engine fact
    # nixl-ssm-one-local-block-assert); 0.27's NIXL worker passes align-mode GDN groups through whole, so
    # prefix caching on this decode meets no known assertion
    Expect("srt-slurm/known-bad-decode-prefix-caching.yaml", expect=KV_BOTH_EXPECT, never=(("HYB003", "decode.*"),)),
    # the version is unknown (a nightly image): before 0.27 decode crashes, a warning that says so
    Expect(
        "srt-slurm/known-bad-mtp-with-ds-layout.yaml",
        bad=(("HYB004", W, "decode.speculative_config"),),
        expect=SEED_EXPECT,
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "srt-slurm/known-bad-fp8-kv-cache-nvfp4.yaml",
        bad=(("*", E, "*.kv_cache_dtype"),),
        expect=SEED_EXPECT,
        never=NEVER_PREFILL_RACE,
    ),
    # the rest of srt-slurm's Qwen3.5 GB200 8k1k disagg set (commit 2cc82fb8), as published: sweeps, fixed
    # concurrency points (sa-bench's lengths lie in [ratio x ISL, ISL]) and accuracy runs (no throughput workload)
    Expect("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8-cc4096.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8-cc4096.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-6xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-6xdep2-1xdep8-cc4096.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-6xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-7xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-7xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-7xdep2-1xdep8-cc4096.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-7xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-8xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-8xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    Expect("srt-slurm/qwen35-397b-gb200-8xdep2-1xdep8-cc4096.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE),
    # DeepSeek-V4-Pro 1p4d on GB200 (commit 04ff0a0a), as published: decode TP8 over two 4-GPU nodes,
    # which srtctl starts with --master-addr/--nnodes/--node-rank; recipectl cannot render it (TOP009). Its
    # model.path is a cluster alias: the model is identity.model.repo, which recipectl knows no architecture of
    Expect(
        "srt-slurm/deepseek-v4-pro-gb200-1p4d-dep8-tp8-offload.yaml",
        expect=KV_BOTH_EXPECT + (("TOP009", W, "decode.parallel"), ("IMP002", I, "model.path")),
        never=(("TOP001", "*"),),
    ),
    # ---------------------------------------------------------------- Dynamo (ai-dynamo/dynamo)
    Expect(
        "dynamo/qwen35-397b-fp8-h100-disagg.yaml",
        expect=(("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling")),
        never=NEVER_PREFILL_RACE,
    ),
    Expect("dynamo/qwen35-27b-h100-disagg-tp1-async-off.yaml", expect=(("VER002", W, "engine.vllm_version"),)),
    Expect(
        "dynamo/qwen35-35b-a3b-runtime-1.3.0-decode-async-off.yaml",
        expect=(("VER002", W, "engine.vllm_version"),),
        never=(("PRF001", "decode.*"),),
    ),
    Expect(
        "dynamo/known-bad-decode-async-on-runtime-1.3.0.yaml",
        bad=(("VER001", W, "decode.async_scheduling"),),
        expect=(("VER002", W, "engine.vllm_version"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "dynamo/known-bad-prefill-without-ds-layout.yaml",
        bad=(("HYB001", E, "prefill.env.VLLM_SSM_CONV_STATE_LAYOUT"),),
        expect=(("VER002", W, "engine.vllm_version"),),
    ),
    Expect(
        "dynamo/known-bad-hybrid-kv-cache-manager-disabled.yaml",
        bad=(
            ("HYB005", E, "prefill.disable_hybrid_kv_cache_manager"),
            ("HYB005", E, "decode.disable_hybrid_kv_cache_manager"),
        ),
        expect=(("VER002", W, "engine.vllm_version"),),
    ),
    # Dynamo's current recipes: v1beta1 components with a ConfigMap and a Secret; v1alpha1 with `bash -lc`
    # scripts reading the container's env and envsubst placeholders the README renders before deploying
    Expect(
        "dynamo/qwen35-122b-nvfp4-b200-disagg-1p2d-v1beta1.yaml",
        # the publisher runs NVFP4 + FP8 KV at ~1,112 tok/s/GPU: #42179's evidence is the 397B
        expect=(
            ("VER002", W, "engine.vllm_version"),
            ("HYB006", W, "*.kv_cache_dtype"),
            ("HYB007", W, "decode.mamba_ssm_cache_dtype"),
            ("HYB003", W, "decode.enable_prefix_caching"),
        ),
        never=NEVER_PREFILL_RACE + (("VER001", "decode.*"), ("CON003", "*"), ("PRF002", "*")),
    ),
    Expect(
        "dynamo/qwen35-122b-fp8-h200-disagg-1p2d-v1beta1.yaml",
        expect=KV_BOTH_EXPECT + (("VER002", W, "engine.vllm_version"), ("HYB007", W, "decode.mamba_ssm_cache_dtype")),
        never=NEVER_PREFILL_RACE + (("VER001", "decode.*"), ("PRF002", "*"), ("HYB006", "*")),
    ),
    # the graph's own `spec.env` (v1beta1), which the operator puts before each component's: the model
    # path and served name the scripts read, and the DS layout; NVFP4 served on H200 by Marlin
    Expect(
        "dynamo/nemotron3-ultra-h200-disagg-1p2d-graph-env-v1beta1.yaml",
        expect=KV_BOTH_EXPECT + (("TOP003", W, "model.quantization"),),
        never=(("ARG002", "*"), ("IMP001", "model.path"), ("IMP001", "*.extra_args.*")),
    ),
    Expect(
        "dynamo/qwen35-397b-fp8-h100-disagg-lc-envsubst.yaml",
        expect=KV_BOTH_EXPECT
        + (("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling"), ("*", I, "engine.image")),
        never=NEVER_PREFILL_RACE + (("HYB003", "*"),),
    ),
    Expect(
        "dynamo/qwen35-397b-fp8-h100-1p3d-lc-envsubst.yaml",
        expect=KV_BOTH_EXPECT
        + (("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling"), ("*", I, "engine.image")),
        never=NEVER_PREFILL_RACE + (("HYB003", "*"),),
    ),
    Expect(
        "dynamo/qwen35-397b-fp8-h100-2p2d-lc-envsubst.yaml",
        expect=KV_BOTH_EXPECT
        + (("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling"), ("*", I, "engine.image")),
        never=NEVER_PREFILL_RACE + (("HYB003", "*"),),
    ),
    Expect(
        "dynamo/qwen35-397b-fp8-h100-3p1d-lc-envsubst.yaml",
        expect=KV_BOTH_EXPECT
        + (("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling"), ("*", I, "engine.image")),
        never=NEVER_PREFILL_RACE + (("HYB003", "*"),),
    ),
    # ---------------------------------------------------------------- vllm serve command lines
    Expect(
        "vllm-serve/qwen35-27b-gb200-tp1-prefill.sh",
        bad=(("VER001", W, "decode.async_scheduling"),),
        expect=(("VER002", W, "engine.vllm_version"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "vllm-serve/qwen35-27b-gb200-tp1-decode.sh",
        bad=(("VER001", W, "decode.async_scheduling"),),
        expect=(("VER002", W, "engine.vllm_version"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect("vllm-serve/qwen35-35b-a3b-fp8-h100-pd.sh", never=(("PRF001", "*"),)),
    Expect("vllm-serve/known-bad-heterogeneous-tp.sh", bad=(("CON001", E, "prefill.parallel"),)),
    Expect(
        "vllm-serve/known-bad-sd-conv-layout.sh",
        bad=(
            ("HYB002", E, "prefill.env.VLLM_SSM_CONV_STATE_LAYOUT"),
            ("HYB002", E, "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"),
        ),
    ),
    Expect("vllm-serve/known-bad-recompute-on-load-failure.sh", bad=(("*", W, "kv_transfer.load_failure_policy"),)),
    Expect(
        "vllm-serve/qwen3-next-80b-a3b-h200-pd.sh",
        expect=(("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling")),
        never=NEVER_PREFILL_RACE + (("HYB003", "*"),),
    ),
    Expect(
        "vllm-serve/known-bad-qwen3-next-mtp-with-ds-layout.sh",
        bad=(("HYB004", W, "decode.speculative_config"),),
        expect=(("VER002", W, "engine.vllm_version"),),
        never=NEVER_PREFILL_RACE,
    ),
    # vLLM's own hybrid P/D CI (config_sweep_accuracy_test.sh's hybrid_ssm_configs through run_accuracy_test.sh):
    # variables with defaults, an assigned KV config, `$PORT`, the sweep's extra arguments in an array (unread,
    # said so); hybrid by architecture: a Mamba2 (granite-4.0-h) and a Mamba1 (Jamba) hybrid besides Qwen3.5
    Expect(
        "vllm-serve/vllm-ci-hybrid-ssm-granite-4.0-h-tiny-tp1.sh",
        expect=CI_EXPECT + (("*", I, "*.extra_args*"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "vllm-serve/vllm-ci-hybrid-ssm-granite-4.0-h-tiny-tp2.sh",
        expect=CI_EXPECT + (("*", I, "*.extra_args*"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect("vllm-serve/vllm-ci-hybrid-ssm-qwen35-0.8b-tp1.sh", expect=CI_EXPECT, never=NEVER_PREFILL_RACE),
    Expect(
        "vllm-serve/vllm-ci-hybrid-ssm-qwen35-0.8b-p-tp1-d-tp2.sh",
        expect=CI_EXPECT + (("CON001", W, "*.parallel"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "vllm-serve/vllm-ci-hybrid-ssm-qwen35-0.8b-mtp.sh",
        expect=CI_EXPECT + (("*", I, "*.extra_args*"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "vllm-serve/vllm-ci-hybrid-ssm-jamba2-3b-tp1.sh",
        expect=CI_EXPECT + (("*", I, "*.extra_args*"),),
        never=NEVER_PREFILL_RACE,
    ),
    Expect(
        "vllm-serve/known-bad-prefill-prefix-caching-0.27.sh",
        # a warning: the assertion needs a prefix-cache hit, and recipectl's own H200 recipe ran on
        # 0.26 with prefix caching on prefill
        bad=(("HYB003", W, "prefill.enable_prefix_caching"),),
    ),
)


def _findings(path: Path) -> list[tuple[str, str, str]]:
    report, _ = validate_file(path)
    assert report.valid, [d.message for d in report.diagnostics]
    return [(d.code, d.severity.value, d.path) for d in report.diagnostics]


def _matches(finding: tuple[str, str, str], want: tuple[str, str, str]) -> bool:
    code, severity, path = want
    return (code == "*" or finding[0] == code) and finding[1] == severity and fnmatch(finding[2], path)


def _params(check: str) -> list:
    out = []
    for e in CORPUS:
        out.append(pytest.param(e, id=e.file))
    return out


def test_corpus_is_complete():
    """Every file under tests/field has its expectations, and the corpus has at least 50 files."""
    files = sorted(str(p.relative_to(FIELD)) for p in FIELD.rglob("*") if p.is_file())
    assert files == sorted(e.file for e in CORPUS)
    assert len(files) >= 50
    for f in files:
        head = (FIELD / f).read_text().splitlines()[:3]
        assert any("Source:" in line for line in head), f"{f}: name the source in a comment at the top"


@pytest.mark.parametrize("entry", _params("caught"))
def test_known_bad_is_caught(entry: Expect):
    found = _findings(FIELD / entry.file)
    missing = [b for b in entry.bad if not any(_matches(f, b) for f in found)]
    assert not missing, f"not caught: {missing}; found {found}"


@pytest.mark.parametrize("entry", _params("no_false_errors"))
def test_no_false_errors(entry: Expect):
    """An error only where the evidence says the recipe breaks."""
    errors = [f for f in _findings(FIELD / entry.file) if f[1] == Severity.ERROR.value]
    false = [f for f in errors if not any(_matches(f, b) for b in entry.bad)]
    assert not false, f"errors the evidence does not support: {false}"


@pytest.mark.parametrize("entry", _params("expected"))
def test_expected_findings(entry: Expect):
    found = _findings(FIELD / entry.file)
    missing = [x for x in entry.expect if not any(_matches(f, x) for f in found)]
    assert not missing, f"missing: {missing}; found {found}"


@pytest.mark.parametrize("entry", _params("never"))
def test_never_findings(entry: Expect):
    found = _findings(FIELD / entry.file)
    wrong = [f for f in found for code, path in entry.never if f[0] == code and fnmatch(f[2], path)]
    assert not wrong, f"findings broader than their source: {wrong}"


def _recipectl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.mark.parametrize("entry", CORPUS, ids=[e.file for e in CORPUS])
def test_validate_exits_0_or_1_with_original_lines(entry: Expect):
    path = FIELD / entry.file
    r = _recipectl("validate", str(path.relative_to(ROOT)))
    assert r.returncode in (0, 1), r.stdout + r.stderr
    # every finding points into an original file, at a line that file has
    lines = {p.name: len(p.read_text().splitlines()) for p in path.parent.iterdir()}
    located = 0
    for line in r.stdout.splitlines():
        head = line.split(" ", 1)[0]
        if head.count(":") == 2 and head.startswith("tests/field/"):
            name, ln = head.split(":")[0].rsplit("/", 1)[-1], int(head.split(":")[1])
            assert name in lines and 1 <= ln <= lines[name], line
            located += 1
    assert located == len(_findings(path))


@pytest.mark.parametrize("entry", CORPUS, ids=[e.file for e in CORPUS])
def test_import_output_validates_the_same(entry: Expect, tmp_path):
    path = FIELD / entry.file
    out = tmp_path / "imported.yaml"
    r = _recipectl("import", str(path.relative_to(ROOT)), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "# from tests/field/" in text
    assert sorted(_findings(out)) == sorted(_findings(path))
