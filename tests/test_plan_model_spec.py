"""ModelSpec: parsing Hugging Face configs of each family, and the built-in published models."""

from __future__ import annotations

import json

import pydantic
import pytest

from recipectl.models import info as model_info
from recipectl.plan import (
    BUILTIN_MODELS,
    QWEN3_5_0_8B,
    QWEN3_5_4B,
    QWEN3_5_9B,
    QWEN3_5_27B,
    QWEN3_5_35B_A3B,
    QWEN3_5_122B_A10B,
    QWEN3_5_397B_A17B,
    QWEN3_NEXT_80B_A3B,
    LayerType,
    ModelFamily,
    ModelSpec,
    builtin_model,
    find_builtin,
)

FULL, LINEAR = LayerType.FULL_ATTENTION, LayerType.LINEAR_ATTENTION


def _every_fourth(n: int) -> list[str]:
    return ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)]


# Shape of the published Qwen/Qwen3.5-35B-A3B config.json (text nested under text_config).
QWEN35_MOE_CONFIG = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "dtype": "bfloat16",
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "layer_types": _every_fourth(40),
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": 4,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "mamba_ssm_dtype": "float32",
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "vocab_size": 248320,
        "full_attention_interval": 4,
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 262144,
    },
    "vision_config": {"depth": 27, "hidden_size": 1152},
}

QWEN3_NEXT_CONFIG = {  # no layer_types: only full_attention_interval
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_hidden_layers": 48,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 262144,
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _write(tmp_path, cfg: dict) -> str:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_qwen35_nested_text_config(tmp_path):
    spec = ModelSpec.from_config_json(_write(tmp_path, QWEN35_MOE_CONFIG), name="Qwen3.5-35B-A3B")
    assert spec.family is ModelFamily.HYBRID
    assert spec.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert (spec.num_full_attention_layers, spec.num_linear_attention_layers) == (10, 30)
    assert spec.layer_types[3] is FULL and spec.layer_types[0] is LINEAR
    assert spec.mamba_ssm_dtype == "float32" and spec.mtp_num_hidden_layers == 1
    assert spec.attn_output_gate and not spec.tie_word_embeddings
    assert spec.gdn_conv_dim == 2 * 128 * 16 + 128 * 32
    # The parsed config and the built-in spec describe the same shape.
    assert spec.model_dump(exclude={"name", "total_params", "active_params"}) == QWEN3_5_35B_A3B.model_dump(
        exclude={"name", "total_params", "active_params"}
    )


def test_qwen3_next_interval_only(tmp_path):
    spec = ModelSpec.from_config_json(_write(tmp_path, QWEN3_NEXT_CONFIG) + "/config.json")
    assert spec.layer_types == tuple(LayerType(t) for t in _every_fourth(48))
    assert spec.attn_output_gate  # Qwen3-Next's attention is gated
    assert spec.mamba_ssm_dtype is None and spec.moe_layer_count == 48
    assert spec.param_counts().total == QWEN3_NEXT_80B_A3B.param_counts().total


def test_dense_llama(tmp_path):
    spec = ModelSpec.from_config_json(_write(tmp_path, LLAMA_CONFIG))
    assert spec.family is ModelFamily.DENSE
    assert spec.head_dim == 128 and spec.num_full_attention_layers == 32
    assert not spec.attn_output_gate and spec.moe_layer_count == 0
    assert spec.param_counts().total == pytest.approx(8.03e9, rel=0.01)  # Llama-3-8B


def test_moe_qwen3(tmp_path):
    spec = ModelSpec.from_config_json(_write(tmp_path, QWEN3_MOE_CONFIG))
    assert spec.family is ModelFamily.MOE
    assert spec.param_counts().total == pytest.approx(30.5e9, rel=0.01)  # Qwen3-30B-A3B
    assert spec.active_param_estimate() == pytest.approx(3.3e9, rel=0.05)


def test_mixtral_experts_use_intermediate_size():
    spec = ModelSpec.from_config_dict(
        {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
        }
    )
    assert spec.num_experts == 8 and spec.moe_intermediate_size == 14336
    assert spec.param_counts().total == pytest.approx(46.7e9, rel=0.01)


@pytest.mark.parametrize("spec", [s for s in BUILTIN_MODELS.values() if s.total_params], ids=lambda s: s.name)
def test_builtin_param_counts_match_published(spec: ModelSpec):
    assert spec.param_counts().total == pytest.approx(spec.total_params, rel=0.02)
    assert spec.active_param_estimate() == pytest.approx(spec.active_params, rel=0.3)


def test_builtin_397b_numbers():
    s = QWEN3_5_397B_A17B
    assert (s.num_hidden_layers, s.num_full_attention_layers, s.num_linear_attention_layers) == (60, 15, 45)
    assert (s.hidden_size, s.num_attention_heads, s.num_key_value_heads, s.head_dim) == (4096, 32, 2, 256)
    assert (s.linear_num_key_heads, s.linear_num_value_heads) == (16, 64)
    assert (s.linear_key_head_dim, s.linear_value_head_dim, s.linear_conv_kernel_dim) == (128, 128, 4)
    assert (s.num_experts, s.num_experts_per_tok) == (512, 10)
    assert s.active_param_estimate() == pytest.approx(17e9, rel=0.03)


def test_builtin_lookup():
    assert builtin_model("nvidia/Qwen3.5-397B-A17B-NVFP4") is QWEN3_5_397B_A17B
    assert builtin_model("Qwen/Qwen3-Next-80B-A3B-Instruct") is QWEN3_NEXT_80B_A3B
    with pytest.raises(KeyError, match="known"):
        builtin_model("Qwen3-0.6B")


@pytest.mark.parametrize(
    ("name", "spec", "quant"),
    [
        ("Qwen/Qwen3.5-397B-A17B", QWEN3_5_397B_A17B, None),
        ("nvidia/Qwen3.5-397B-A17B-NVFP4", QWEN3_5_397B_A17B, "nvfp4"),
        ("Qwen/Qwen3.5-397B-A17B-FP8", QWEN3_5_397B_A17B, "fp8"),
        ("qwen3.5-122b-a10b-fp8", QWEN3_5_122B_A10B, "fp8"),
        ("Qwen/Qwen3.5-35B-A3B-Base", QWEN3_5_35B_A3B, None),
        ("Qwen/Qwen3.5-27B-FP8", QWEN3_5_27B, "fp8"),
        ("QWEN/QWEN3.5-9B", QWEN3_5_9B, None),
        ("/models/Qwen3.5-4B/", QWEN3_5_4B, None),
        ("Qwen/Qwen3.5-0.8B", QWEN3_5_0_8B, None),
        ("Qwen/Qwen3-Next-80B-A3B-Thinking", QWEN3_NEXT_80B_A3B, None),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", QWEN3_NEXT_80B_A3B, "fp8"),
        ("Qwen/Qwen3.5-27B-AWQ", QWEN3_5_27B, None),
    ],
)
def test_published_names_resolve_with_their_quantization(name, spec, quant):
    assert find_builtin(name) == (spec, quant)


@pytest.mark.parametrize("name", ["Qwen3.5-2B", "Qwen3.5-27", "Qwen3-0.6B", "Qwen3.5-397B", "llama"])
def test_unknown_or_partial_names_do_not_resolve(name):
    assert find_builtin(name) is None  # "Qwen3.5-2B" is not "Qwen3.5-27B"


def test_did_you_mean_in_the_lookup_error():
    with pytest.raises(KeyError, match=r"did you mean Qwen3\.5-122B-A10B"):
        builtin_model("Qwen3.5-122B-A12B")


def test_known_models_are_derived_from_the_builtin_specs():
    known = {name.lower(): model_info.known_model(name) for name in BUILTIN_MODELS}
    for spec in BUILTIN_MODELS.values():
        info = known[spec.name.lower()]
        assert info["spec"] == spec.name and info["family"] == "hybrid"
        assert info["num_experts"] == (spec.num_experts or None)
        assert model_info.known_model(f"Qwen/{spec.name}-FP8") == info
    assert known["qwen3.5-27b"]["multimodal"] and not known["qwen3-next-80b-a3b"]["multimodal"]
    assert model_info.known_model("Qwen/Qwen3.5-2B") is None


def test_spec_is_frozen_and_validated():
    with pytest.raises(pydantic.ValidationError):
        QWEN3_5_397B_A17B.num_hidden_layers = 1  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError, match="layer_types"):
        ModelSpec.model_validate({**QWEN3_5_397B_A17B.model_dump(), "num_hidden_layers": 59})
    with pytest.raises(pydantic.ValidationError, match="linear_"):
        ModelSpec.model_validate({**QWEN3_5_397B_A17B.model_dump(), "linear_num_key_heads": 0})
