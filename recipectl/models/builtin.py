"""Specs of the published models recipectl plans for, with the source of every number.

The configs were not downloaded from the Hugging Face hub (no network here); each number was
checked against public copies of the model's ``config.json`` or model card, listed per model
below (with the hub URL of the config it reproduces). Where copies disagreed the disagreement and
the tie-breaker are noted; where one copy alone gives a number, a cross-check (usually the
published parameter count) is noted.

Parameter totals are published ones where a precise text-model figure is known (model names are
rounded: "397B-A17B" = 397B total, 17B active), else None; :meth:`ModelSpec.param_counts`
approximates them from the dims and the tests check the two agree within a few percent.
"""

from __future__ import annotations

import difflib

from recipectl.models.family import ModelFamily
from recipectl.models.spec import LayerType, ModelSpec

# Every published Qwen3.5 and Qwen3-Next model card: "Context Length: 262,144 natively" (more only
# with YaRN rope scaling, which a server uses only when told to); the configs' max_position_embeddings.
NATIVE_CONTEXT = 262_144


def _every_fourth_full(n_layers: int) -> tuple[LayerType, ...]:
    """Qwen3-Next / Qwen3.5 layout: layer i is full attention when (i+1) % 4 == 0."""
    return tuple(LayerType.LINEAR_ATTENTION if (i + 1) % 4 else LayerType.FULL_ATTENTION for i in range(n_layers))


# Qwen/Qwen3.5-397B-A17B (text part of Qwen3_5MoeForConditionalGeneration, model_type
# qwen3_5_moe / text qwen3_5_moe_text). Sources:
#  [a] vllm-facts "Memory of a hybrid model": 60 layers (15 full attention,
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
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
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
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
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
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
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

# Qwen/Qwen3.5-122B-A10B (Qwen3_5MoeForConditionalGeneration, text model_type qwen3_5_moe_text).
# Config: https://huggingface.co/Qwen/Qwen3.5-122B-A10B/blob/main/config.json. Sources:
#  [h] the model card (https://huggingface.co/Qwen/Qwen3.5-122B-A10B) as summarised by two public
#      model directories: 48 layers (12 full attention), hidden 3072, 32 q / 2 kv heads, head_dim
#      256, 256 experts, 8 routed + 1 shared, expert intermediate 1024, vocab 248320, MTP 1;
#  [i] a public NPU inference test that writes this model's text config: the same numbers plus
#      shared_expert_intermediate_size 1024, full_attention_interval 4, linear k/v heads 16/64,
#      k/v head dims 128/128, conv kernel 4, mlp_only_layers [] (every layer MoE).
#  Cross-check: a public GGUF listing gives 122.11B parameters (text model, vision tower in a
#  separate file); these dims give 122.11B, which rules out 32 linear value heads (~119B).
#  tie_word_embeddings false, mamba_ssm_dtype float32: as every Qwen3.5 MoE config seen ([b], [d]).
QWEN3_5_122B_A10B = ModelSpec(
    name="Qwen3.5-122B-A10B",
    architecture="Qwen3_5MoeForConditionalGeneration",
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
    num_hidden_layers=48,
    layer_types=_every_fourth_full(48),
    hidden_size=3072,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=64,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=1024,
    shared_expert_intermediate_size=1024,
    vocab_size=248320,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
    total_params=122_110_000_000,
    active_params=10_000_000_000,
)

# Qwen/Qwen3.5-27B (Qwen3_5ForConditionalGeneration, dense, text model_type qwen3_5_text).
# Config: https://huggingface.co/Qwen/Qwen3.5-27B/blob/main/config.json. Sources:
#  [j] two public test fixtures reproducing its nested config: text_config hidden 5120,
#      intermediate 17408, 64 layers, full_attention_interval 4, 24 q / 4 kv heads, head_dim 256,
#      linear k/v heads 16/48, k/v head dims 128/128, conv kernel 4, mamba_ssm_dtype float32,
#      mtp_num_hidden_layers 1, vocab 248320, tie_word_embeddings false;
#  [k] a public Megatron training script for it (24/4 heads, kv channels 256, 64 layers, hidden
#      5120, ffn 17408, untied embeddings, vocab 248320) and the model card's layout
#      16 x (3 x Gated DeltaNet + 1 x Gated Attention), hidden 5120.
QWEN3_5_27B = ModelSpec(
    name="Qwen3.5-27B",
    architecture="Qwen3_5ForConditionalGeneration",
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
    num_hidden_layers=64,
    layer_types=_every_fourth_full(64),
    hidden_size=5120,
    num_attention_heads=24,
    num_key_value_heads=4,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    intermediate_size=17408,
    vocab_size=248320,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
)

# Qwen/Qwen3.5-9B (Qwen3_5ForConditionalGeneration, dense).
# Config: https://huggingface.co/Qwen/Qwen3.5-9B/blob/main/config.json. Sources:
#  [l] the model card (https://huggingface.co/Qwen/Qwen3.5-9B, as mirrored publicly): 32 layers,
#      8 x (3 x Gated DeltaNet + 1 x Gated Attention), hidden 4096, GDN 32 v / 16 qk heads of dim
#      128, attention 16 q / 4 kv heads of dim 256, FFN 12288, vocab 248320, LM output 248320;
#  [m] the GGUF metadata of a conversion: 32 layers, embed 4096, FFN 12288, 16/4 heads, SSM
#      d_state 128, d_conv 4, 32 value heads, 16 groups, 8.95B parameters (text model) -- the
#      dims give 8.95B with untied embeddings, 7.94B tied; [n] fine-tuned checkpoints' config.json
#      (text_config: hidden 4096, intermediate 12288, head_dim 256, full_attention_interval 4).
QWEN3_5_9B = ModelSpec(
    name="Qwen3.5-9B",
    architecture="Qwen3_5ForConditionalGeneration",
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
    num_hidden_layers=32,
    layer_types=_every_fourth_full(32),
    hidden_size=4096,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    intermediate_size=12288,
    vocab_size=248320,
    tie_word_embeddings=False,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
    total_params=8_950_000_000,
    active_params=8_950_000_000,
)

# Qwen/Qwen3.5-4B (Qwen3_5ForConditionalGeneration, dense).
# Config: https://huggingface.co/Qwen/Qwen3.5-4B/blob/main/config.json. Sources:
#  [o] two public code fixtures pinning its text config: hidden 2560, intermediate 9216, 32 layers
#      (full attention at 3, 7, ..., 31), 16 q / 4 kv heads, head_dim 256, linear k/v heads 16/32,
#      k/v head dims 128/128, mamba_ssm_dtype float32, vocab 248320; a checkpoint derived from it
#      (Qwen3_5ForCausalLM) with the same dims and conv kernel 4;
#  [p] the model card as summarised publicly (GDN 32 v / 16 qk heads, hidden 2560, 32 layers,
#      FFN 9216, MTP 1).
#  tie_word_embeddings true: a published Q8_0 GGUF of it is 4,482,403,424 bytes at 8.5 bits per
#      weight, about 4.22B parameters; the dims give 4.21B tied, 4.84B untied.
QWEN3_5_4B = ModelSpec(
    name="Qwen3.5-4B",
    architecture="Qwen3_5ForConditionalGeneration",
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
    num_hidden_layers=32,
    layer_types=_every_fourth_full(32),
    hidden_size=2560,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    intermediate_size=9216,
    vocab_size=248320,
    tie_word_embeddings=True,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
)

# Qwen/Qwen3.5-0.8B (Qwen3_5ForConditionalGeneration, dense).
# Config: https://huggingface.co/Qwen/Qwen3.5-0.8B/blob/main/config.json. Sources:
#  [q] a public NPU inference test that writes its text config: hidden 1024, head_dim 256,
#      intermediate 3584, 24 layers, 8 q / 2 kv heads, tie_word_embeddings true,
#      full_attention_interval 4, linear k/v heads 16/16, k/v head dims 128/128, conv kernel 4;
#  [r] a public Megatron training script for it (8/2 heads, kv channels 256, 24 layers, hidden
#      1024, ffn 3584, vocab 248320, embeddings not untied), and a checkpoint derived from it
#      (linear k/v heads 16/16, conv 4, mamba_ssm_dtype float32, mtp_num_hidden_layers 1).
QWEN3_5_0_8B = ModelSpec(
    name="Qwen3.5-0.8B",
    architecture="Qwen3_5ForConditionalGeneration",
    family=ModelFamily.HYBRID,
    max_position_embeddings=NATIVE_CONTEXT,
    num_hidden_layers=24,
    layer_types=_every_fourth_full(24),
    hidden_size=1024,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    attn_output_gate=True,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    intermediate_size=3584,
    vocab_size=248320,
    tie_word_embeddings=True,
    mtp_num_hidden_layers=1,
    dtype="bfloat16",
    mamba_ssm_dtype="float32",
)

# Not built in: Qwen/Qwen3.5-2B. Its hidden size (2048) and FFN (6144) appear in a derived
# checkpoint, but no public copy of its layer count, head counts or GDN dims was found; point
# model.path at a directory holding its config.json to plan it.

BUILTIN_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        QWEN3_5_397B_A17B,
        QWEN3_5_122B_A10B,
        QWEN3_5_35B_A3B,
        QWEN3_5_27B,
        QWEN3_5_9B,
        QWEN3_5_4B,
        QWEN3_5_0_8B,
        QWEN3_NEXT_80B_A3B,
    )
}

# Name suffixes of published variants that share a base model's shape: a quantized checkpoint
# (the value says which planner quantization it is), a post-training flavour (None).
_VARIANT_SUFFIXES: dict[str, str | None] = {
    "-nvfp4": "nvfp4",
    "-fp8": "fp8",
    "-fp8-dynamic": "fp8",
    "-bf16": "bf16",
    "-instruct": None,
    "-thinking": None,
    "-base": None,
}


def resolve_name(name: str) -> tuple[str, str | None]:
    """(base key, quantization named by a suffix) of a model name or path: the last path
    component, lower-cased, variant suffixes stripped in any order
    ("nvidia/Qwen3.5-397B-A17B-NVFP4" -> ("qwen3.5-397b-a17b", "nvfp4"))."""
    key = name.rstrip("/").rsplit("/", 1)[-1].lower()
    quant: str | None = None
    stripped = True
    while stripped:
        stripped = False
        for suffix, q in _VARIANT_SUFFIXES.items():
            if key.endswith(suffix) and len(key) > len(suffix):
                key = key[: -len(suffix)]
                quant = quant or q
                stripped = True
    return key, quant


def find_builtin(name: str) -> tuple[ModelSpec, str | None] | None:
    """The built-in spec a model name or path denotes and the quantization its name says, or
    None. Matching is exact on the base name (case-insensitive, ``org/`` prefix and variant
    suffixes ignored): "Qwen3.5-2B" is not taken for "Qwen3.5-27B"."""
    key, quant = resolve_name(name)
    by_key = {spec_name.lower(): spec for spec_name, spec in BUILTIN_MODELS.items()}
    if key in by_key:
        return by_key[key], quant
    # another variant suffix ("-AWQ", "-GPTQ-Int4"): the longest base name followed by "-"
    for spec_key in sorted(by_key, key=len, reverse=True):
        if key.startswith(spec_key + "-"):
            return by_key[spec_key], quant
    return None


def suggest_builtin(name: str, n: int = 3) -> list[str]:
    """Built-in names closest to `name` (a did-you-mean list, possibly empty)."""
    key, _ = resolve_name(name)
    by_key = {spec_name.lower(): spec_name for spec_name in BUILTIN_MODELS}
    return [by_key[k] for k in difflib.get_close_matches(key, list(by_key), n=n, cutoff=0.6)]


def builtin_model(name: str) -> ModelSpec:
    """A built-in spec by name (case-insensitive; an ``org/`` prefix and ``-NVFP4``/``-FP8``/
    ``-Instruct``/``-Thinking``/``-Base`` suffixes are ignored, since quantization is a planning
    parameter, not a shape)."""
    found = find_builtin(name)
    if found is None:
        hint = suggest_builtin(name)
        raise KeyError(
            f"no built-in model {name!r}"
            + (f" (did you mean {', '.join(hint)}?)" if hint else "")
            + f"; known: {', '.join(sorted(BUILTIN_MODELS))}"
        )
    return found[0]
