"""The shape of a model, as far as capacity planning needs it.

A :class:`ModelSpec` holds the dimensions that decide how much memory a model's weights, its
attention KV cache and its Gated DeltaNet (GDN) state take, and nothing else. It is built from a
Hugging Face ``config.json`` (:meth:`ModelSpec.from_config_json`) or taken from
:mod:`recipectl.models.builtin`.

Parameter counts (:meth:`ModelSpec.param_counts`) are *approximated from the dimensions*: the
projections, experts and embeddings are counted exactly, small tensors (norms, biases, conv
weights, ``A_log``/``dt_bias``) are counted too, but a vision tower is not, so a published total
for a vision-language checkpoint is a little larger. Use the published ``total_params`` where
one is known.
"""

from __future__ import annotations

from enum import Enum
from os import PathLike
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..fileio import read_json_bounded
from .family import ModelFamily


class LayerType(str, Enum):
    """The two mixer kinds of a hybrid model, spelled as in HF ``layer_types``."""

    FULL_ATTENTION = "full_attention"
    LINEAR_ATTENTION = "linear_attention"


# Model types whose attention projection is gated (q_proj emits 2x: query and gate).
_GATED_ATTENTION_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text")


class ParamCounts(BaseModel):
    """Parameter counts by part, approximated from the dimensions (see the module docstring).

    The split matters because each part is quantized and sharded differently: routed experts are
    sharded across expert-parallel ranks, everything else is replicated per data-parallel rank.
    """

    # built when first used: `validate` imports this module and, unless it plans, never does
    model_config = ConfigDict(frozen=True, defer_build=True)

    embedding: int
    lm_head: int
    attention: int  # full-attention projections (+ q/k norms)
    linear_attention: int  # GDN projections, conv1d, A_log, dt_bias, norm
    dense_mlp: int  # non-MoE MLP layers
    shared_experts: int  # shared expert MLP + its gate
    routed_experts: int
    router: int
    norms: int  # per-layer input/post-attention norms + final norm
    mtp: int  # multi-token-prediction layers (loaded only with speculative decoding)
    mtp_routed_experts: int  # the routed-expert part of ``mtp``

    @property
    def total(self) -> int:
        """All language-model parameters, MTP layers excluded."""
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.linear_attention
            + self.dense_mlp
            + self.shared_experts
            + self.routed_experts
            + self.router
            + self.norms
        )


class ModelSpec(BaseModel):
    """Dimensions of a (possibly hybrid) decoder-only language model.

    Field names follow the Hugging Face config keys, so a spec and the ``config.json`` it came from
    read alike. Only the language model is described; a vision tower is ignored.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    architecture: str = ""
    family: ModelFamily
    num_hidden_layers: int = Field(gt=0)
    layer_types: tuple[LayerType, ...]
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    attn_output_gate: bool = False
    # Gated DeltaNet (linear attention); zero for models without GDN layers.
    linear_num_key_heads: int = Field(default=0, ge=0)
    linear_num_value_heads: int = Field(default=0, ge=0)
    linear_key_head_dim: int = Field(default=0, ge=0)
    linear_value_head_dim: int = Field(default=0, ge=0)
    linear_conv_kernel_dim: int = Field(default=0, ge=0)
    # MLP / MoE.
    intermediate_size: int = Field(default=0, ge=0)
    num_experts: int = Field(default=0, ge=0)
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)
    num_moe_layers: int | None = Field(default=None, ge=0)  # None: every layer when num_experts
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    mtp_num_hidden_layers: int = Field(default=0, ge=0)
    dtype: str = "bfloat16"
    mamba_ssm_dtype: str | None = None  # Qwen3.5 configs pin the SSM cache dtype (float32)
    # The context the model was trained for: vLLM's max_model_len when a server sets none
    # (ModelConfig derives it from max_position_embeddings). None: not known.
    max_position_embeddings: int | None = Field(default=None, gt=0)
    total_params: int | None = None  # published figure, where known
    active_params: int | None = None  # published figure, where known

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries, num_hidden_layers is {self.num_hidden_layers}"
            )
        if self.num_linear_attention_layers:
            gdn = (
                self.linear_num_key_heads,
                self.linear_num_value_heads,
                self.linear_key_head_dim,
                self.linear_value_head_dim,
                self.linear_conv_kernel_dim,
            )
            if min(gdn) <= 0:
                raise ValueError("a model with linear_attention layers needs every linear_* dim")
            if self.family is not ModelFamily.HYBRID:
                raise ValueError("linear_attention layers imply family hybrid")
        elif self.family is ModelFamily.HYBRID:
            raise ValueError("family hybrid needs at least one linear_attention layer")
        if self.num_experts and not (self.num_experts_per_tok and self.moe_intermediate_size):
            raise ValueError("num_experts needs num_experts_per_tok and moe_intermediate_size")
        return self

    # ----- derived shape -------------------------------------------------------------------
    @property
    def num_full_attention_layers(self) -> int:
        return sum(t is LayerType.FULL_ATTENTION for t in self.layer_types)

    @property
    def num_linear_attention_layers(self) -> int:
        return sum(t is LayerType.LINEAR_ATTENTION for t in self.layer_types)

    @property
    def is_hybrid(self) -> bool:
        return self.family is ModelFamily.HYBRID

    @property
    def moe_layer_count(self) -> int:
        if not self.num_experts:
            return 0
        return self.num_hidden_layers if self.num_moe_layers is None else self.num_moe_layers

    @property
    def gdn_conv_dim(self) -> int:
        """``2*key_dim*num_k_heads + value_dim*num_v_heads``: channels the GDN conv runs over."""
        return (
            2 * self.linear_key_head_dim * self.linear_num_key_heads
            + self.linear_value_head_dim * self.linear_num_value_heads
        )

    # ----- parameters ----------------------------------------------------------------------
    def _attention_params(self) -> int:
        h, hd = self.hidden_size, self.head_dim
        q_out = self.num_attention_heads * hd * (2 if self.attn_output_gate else 1)
        kv_out = 2 * self.num_key_value_heads * hd
        return h * q_out + h * kv_out + self.num_attention_heads * hd * h + 2 * hd

    def _gdn_params(self) -> int:
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        in_proj = h * (2 * key_dim + 2 * value_dim)  # q, k, v, z (Qwen3-Next fuses as qkvz)
        in_proj_ba = h * 2 * self.linear_num_value_heads
        conv = self.gdn_conv_dim * self.linear_conv_kernel_dim
        small = 2 * self.linear_num_value_heads + self.linear_value_head_dim  # A_log, dt_bias, norm
        return in_proj + in_proj_ba + conv + value_dim * h + small

    def _moe_params(self) -> tuple[int, int, int]:
        """(routed experts, shared experts, router) of one MoE layer."""
        h = self.hidden_size
        routed = self.num_experts * 3 * h * self.moe_intermediate_size
        shared = 0
        if self.shared_expert_intermediate_size:
            shared = 3 * h * self.shared_expert_intermediate_size + h  # + shared_expert_gate
        return routed, shared, h * self.num_experts

    def param_counts(self) -> ParamCounts:
        """Parameters by part, approximated from the dims (no vision tower)."""
        h = self.hidden_size
        routed, shared, router = self._moe_params()
        n_moe = self.moe_layer_count
        n_dense_mlp = self.num_hidden_layers - n_moe
        dense_mlp_one = 3 * h * self.intermediate_size
        mtp_layer = (
            self._attention_params() + (routed + shared + router if n_moe else dense_mlp_one) + 2 * h * h + 6 * h
        )
        return ParamCounts(
            embedding=self.vocab_size * h,
            lm_head=0 if self.tie_word_embeddings else self.vocab_size * h,
            attention=self.num_full_attention_layers * self._attention_params(),
            linear_attention=self.num_linear_attention_layers * self._gdn_params(),
            dense_mlp=n_dense_mlp * dense_mlp_one,
            shared_experts=n_moe * shared,
            routed_experts=n_moe * routed,
            router=n_moe * router,
            norms=2 * h * self.num_hidden_layers + h,
            mtp=self.mtp_num_hidden_layers * mtp_layer,
            mtp_routed_experts=self.mtp_num_hidden_layers * (routed if n_moe else 0),
        )

    def active_param_estimate(self) -> int:
        """Parameters touched per token: all but the unpicked routed experts (lm_head included)."""
        c = self.param_counts()
        if not self.num_experts:
            return c.total
        per_expert = c.routed_experts // max(1, self.num_experts)
        return c.total - c.routed_experts + per_expert * self.num_experts_per_tok

    # ----- constructors --------------------------------------------------------------------
    @classmethod
    def from_config_json(cls, path: str | PathLike[str], name: str | None = None) -> "ModelSpec":
        """Read a Hugging Face ``config.json`` (a file or the directory holding one)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        data = read_json_bounded(p, 16 << 20)  # as a recipe's model config.json is read (models/info.py)
        if not isinstance(data, dict):
            raise ValueError(f"{p} is not a JSON object")
        return cls.from_config_dict(data, name=name or p.parent.name or "model")

    @classmethod
    def from_config_dict(cls, data: dict[str, Any], name: str = "model") -> "ModelSpec":
        """Build a spec from a parsed HF config.

        Handles the Qwen3.5 layout (``Qwen3_5*``/``qwen3_5_moe``: the language model nested under
        ``text_config``), Qwen3-Next (``layer_types`` or only ``full_attention_interval``, which
        transformers expands as "every interval-th layer is full attention"), and flat dense
        (Llama, Qwen3) or MoE (Qwen3-MoE, Mixtral) configs.
        """
        text = dict(data.get("text_config") or {})
        cfg: dict[str, Any] = {**{k: v for k, v in data.items() if k != "text_config"}, **text}
        architectures = data.get("architectures") or text.get("architectures") or [""]
        model_type = str(cfg.get("model_type", ""))
        n_layers = int(cfg["num_hidden_layers"])
        hybrid = "linear_num_value_heads" in cfg or "linear_attention" in (cfg.get("layer_types") or [])
        layer_types = _layer_types(cfg, n_layers, hybrid)
        n_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        num_experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
        moe_inter = int(cfg.get("moe_intermediate_size") or 0)
        if num_experts and not moe_inter:  # Mixtral: the experts use intermediate_size
            moe_inter = int(cfg.get("intermediate_size") or 0)
        family = (
            ModelFamily.HYBRID
            if LayerType.LINEAR_ATTENTION in layer_types
            else ModelFamily.MOE
            if num_experts
            else ModelFamily.DENSE
        )
        gdn = (
            {
                k: int(cfg.get(k) or 0)
                for k in (
                    "linear_num_key_heads",
                    "linear_num_value_heads",
                    "linear_key_head_dim",
                    "linear_value_head_dim",
                    "linear_conv_kernel_dim",
                )
            }
            if hybrid
            else {}
        )
        return cls(
            name=name,
            architecture=str(architectures[0]),
            family=family,
            num_hidden_layers=n_layers,
            layer_types=layer_types,
            hidden_size=hidden,
            num_attention_heads=n_heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=int(cfg.get("head_dim") or hidden // n_heads),
            attn_output_gate=bool(cfg.get("attn_output_gate", model_type in _GATED_ATTENTION_TYPES)),
            intermediate_size=int(cfg.get("intermediate_size") or 0),
            num_experts=num_experts,
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0) if num_experts else 0,
            moe_intermediate_size=moe_inter if num_experts else 0,
            shared_expert_intermediate_size=(
                int(cfg.get("shared_expert_intermediate_size") or 0) if num_experts else 0
            ),
            num_moe_layers=_num_moe_layers(cfg, n_layers) if num_experts else None,
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))),
            # Qwen3.5 spells it mtp_num_hidden_layers; Qwen3-Next (and DeepSeek) use
            # num_nextn_predict_layers. Absent means none declared.
            mtp_num_hidden_layers=int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0),
            dtype=str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16"),
            mamba_ssm_dtype=cfg.get("mamba_ssm_dtype"),
            max_position_embeddings=int(cfg["max_position_embeddings"]) if cfg.get("max_position_embeddings") else None,
            **gdn,
        )


def _layer_types(cfg: dict[str, Any], n_layers: int, hybrid: bool) -> tuple[LayerType, ...]:
    """``layer_types`` as given, else derived as transformers' Qwen3-Next/Qwen3.5 configs do."""
    if cfg.get("layer_types"):
        return tuple(LayerType(t) for t in cfg["layer_types"])
    if not hybrid:
        return (LayerType.FULL_ATTENTION,) * n_layers
    interval = int(cfg.get("full_attention_interval") or 4)  # transformers' default is 4
    return tuple(
        LayerType.LINEAR_ATTENTION if (i + 1) % interval else LayerType.FULL_ATTENTION for i in range(n_layers)
    )


def _num_moe_layers(cfg: dict[str, Any], n_layers: int) -> int | None:
    """Layers with a sparse MLP, by Qwen2/3-MoE's rule (``mlp_only_layers``, sparse step);
    None when every layer is (the spec's default)."""
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    step = int(cfg.get("decoder_sparse_step") or 1)
    n = sum(1 for i in range(n_layers) if i not in mlp_only and (i + 1) % step == 0)
    return None if n == n_layers else n
