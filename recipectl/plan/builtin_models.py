"""Specs of the published models recipectl plans for, with the source of every number.

The configs were not downloaded from the Hugging Face hub (no network here); each number was
checked against at least two public copies of the model's ``config.json`` or model card found
with the project's search tool, listed per model below. Where copies disagreed the disagreement
and the tie-breaker are noted.

Parameter totals are the published ones (model names: "397B-A17B" = 397B total, 17B active);
:meth:`ModelSpec.param_counts` approximates them from the dims and the tests check the two agree
within a few percent.
"""

from __future__ import annotations

from recipectl.plan.model_spec import LayerType, ModelFamily, ModelSpec


def _every_fourth_full(n_layers: int) -> tuple[LayerType, ...]:
    """Qwen3-Next / Qwen3.5 layout: layer i is full attention when (i+1) % 4 == 0."""
    return tuple(LayerType.LINEAR_ATTENTION if (i + 1) % 4 else LayerType.FULL_ATTENTION
                 for i in range(n_layers))


# Qwen/Qwen3.5-397B-A17B (text part of Qwen3_5MoeForConditionalGeneration, model_type
# qwen3_5_moe / text qwen3_5_moe_text). Sources:
#  [a] /work/shared/docs/vllm-facts.md "Memory of a hybrid model": 60 layers (15 full attention,
#      45 GDN), hidden 4096, 32 q / 2 kv heads, head_dim 256, linear k/v heads 16/64, k/v head
#      dims 128/128, conv kernel 4, 512 experts, 10 active.
#  [b] a public Rust test that parses the nested HF config of Qwen3.5-397B-A17B
#      (text_config: head_dim 256, hidden 4096, moe_intermediate_size 1024, 32/2 heads,
#      512 experts, 10 per token, 60 layers, shared_expert_intermediate_size 1024,
#      vocab 248320; top-level tie_word_embeddings false).
#  [c] a Python comment quoting https://huggingface.co/Qwen/Qwen3.5-397B-A17B/blob/main/config.json
#      (linear_key_head_dim 128, linear_num_key_heads 16, linear_num_value_heads 64,
#      linear_value_head_dim 128), and two planner fixtures keyed "Qwen/Qwen3.5-397B-A17B"
#      (attn_output_gate true, full_attention_interval 4, linear_conv_kernel_dim 4).
#  shared_expert_intermediate_size: one fixture (Megatron-Bridge test "sample" config) says
#      4096, four others say 1024. 1024 it is: with 4096 the active count would be ~19.5B, not
#      the 17B of the name; with 1024 the dims give ~17.2B active and ~396B total.
#  mamba_ssm_dtype float32: [a] ("auto SSM dtype comes from the HF config's mamba_ssm_dtype,
#      float32 on the published models") and the published Qwen3.5 text configs seen ([d]).
#  mtp_num_hidden_layers 1: the Qwen3.5 text configs seen ([d]: 27B, 35B-A3B) declare 1; the
#      397B model card says it has built-in MTP; vLLM's qwen3_5_mtp.py defaults to 1 as well.
QWEN3_5_397B_A17B = ModelSpec(
    name="Qwen3.5-397B-A17B",
    architecture="Qwen3_5MoeForConditionalGeneration",
    family=ModelFamily.HYBRID_GDN,
    num_hidden_layers=60,
    layer_types=_every_fourth_full(60),
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=64,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_experts=512,
    num_experts_per_tok=10,
    moe_intermediate_size=1024,
    shared_expert_intermediate_size=1024,
    vocab_size=248320,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
    total_params=397_000_000_000,
    active_params=17_000_000_000,
)

# Qwen/Qwen3-Next-80B-A3B-Instruct (Qwen3NextForCausalLM, model_type qwen3_next). Sources:
#  [e] a planner preset citing https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct and a
#      second one "taken from HF's config.json": hidden 2048, intermediate 5120, moe 512,
#      shared 512, 48 layers, full_attention_interval 4, 16 q / 2 kv heads, head_dim 256,
#      linear k/v heads 16/32, k/v head dims 128/128, conv 4, 512 experts, 10 per token,
#      vocab 151936, tie_word_embeddings false, bfloat16; [f] a C++ test embedding a
#      Qwen3-Next release config with the same numbers (mlp_only_layers [], decoder_sparse_step 1).
#  No mamba_ssm_dtype key: the SSM cache follows --mamba-ssm-cache-dtype / the model dtype.
#  MTP: no key in the config; vLLM's qwen3_next_mtp.py reads num_nextn_predict_layers with a
#      default of 1.
#  Cross-check: a public listing gives Qwen3-Coder-Next (same architecture and dims) 79,674,391,296
#  safetensors parameters; the dims give ~79.7B.
QWEN3_NEXT_80B_A3B = ModelSpec(
    name="Qwen3-Next-80B-A3B",
    architecture="Qwen3NextForCausalLM",
    family=ModelFamily.HYBRID_GDN,
    num_hidden_layers=48,
    layer_types=_every_fourth_full(48),
    hidden_size=2048,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    intermediate_size=5120,
    num_experts=512,
    num_experts_per_tok=10,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    vocab_size=151936,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype=None,
    total_params=80_000_000_000,
    active_params=3_000_000_000,
)

# Qwen/Qwen3.5-35B-A3B (Qwen3_5MoeForConditionalGeneration, text model_type qwen3_5_moe_text).
# Sources: [d] a Swift test building the nested HF config (text_config: hidden 2048, 40 layers,
#  layer_types every 4th full, 16 q / 2 kv heads, head_dim 256, attn_output_gate true, conv 4,
#  linear k heads 16 x 128, v heads 32 x 128, mamba_ssm_dtype float32, 256 experts, 8 per token,
#  moe 512, shared 512, vocab 248320, tie false, mtp_num_hidden_layers 1); [g] a planner fixture
#  keyed "Qwen/Qwen3.5-35B-A3B" with the same numbers.
QWEN3_5_35B_A3B = ModelSpec(
    name="Qwen3.5-35B-A3B",
    architecture="Qwen3_5MoeForConditionalGeneration",
    family=ModelFamily.HYBRID_GDN,
    num_hidden_layers=40,
    layer_types=_every_fourth_full(40),
    hidden_size=2048,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    vocab_size=248320,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
    total_params=35_000_000_000,
    active_params=3_000_000_000,
)

BUILTIN_MODELS: dict[str, ModelSpec] = {
    m.name: m for m in (QWEN3_5_397B_A17B, QWEN3_NEXT_80B_A3B, QWEN3_5_35B_A3B)
}


def builtin_model(name: str) -> ModelSpec:
    """A built-in spec by name (case-insensitive; an ``org/`` prefix and ``-NVFP4``/``-FP8``
    suffixes are ignored, since quantization is a planning parameter, not a shape)."""
    key = name.split("/")[-1].lower()
    for suffix in ("-nvfp4", "-fp8", "-instruct", "-thinking"):
        key = key.removesuffix(suffix)
    for spec_name, spec in BUILTIN_MODELS.items():
        if spec_name.lower() == key:
            return spec
    raise KeyError(f"no built-in model {name!r}; known: {', '.join(sorted(BUILTIN_MODELS))}")
