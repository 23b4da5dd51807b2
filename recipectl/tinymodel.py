"""Generate a tiny random-weight model for running the real engine on a CPU.

Run it with the ENGINE's Python (it needs torch, transformers and tokenizers, which recipectl
itself does not depend on)::

    PYTHONPATH=/path/to/recipectl HF_HUB_OFFLINE=1 \\
        ~/.cache/recipectl/engine/bin/python -m recipectl.tinymodel --out DIR [--kind hybrid|dense] [--seed 0]

``--kind hybrid`` (default) makes a Qwen3-Next model (``Qwen3NextForCausalLM``): 3 Gated DeltaNet
layers + 1 full-attention layer (full attention every 4th layer), a small MoE, bf16. The GDN
key/value head dims are 64, which vLLM's CPU GDN kernels accept (64 or 128 only).
``--kind dense`` makes a tiny dense Qwen3 (``Qwen3ForCausalLM``).

Weights are random but initialised from a fixed seed (initializer_range 0.1) and written with
``save_pretrained`` (safetensors): outputs are varied and reproducible, unlike
``--load-format dummy``. The output-embedding rows of the special tokens are zeroed so greedy
decoding never picks EOS: completions always run to ``max_tokens``. The same parameters give
byte-identical weight files. The tokenizer is a
byte-level BPE trained locally with ``tokenizers`` on a fixed corpus (no hub access).

A stamp file records the parameters; if DIR already holds a model made with the same parameters
nothing is done. The output directory is printed at the end.

Only the standard library is imported at module level: recipectl's CLI imports this module's
constants without the engine installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

GENERATOR_VERSION = 2
STAMP_NAME = ".recipectl-tinymodel.json"
SERVED_MODEL_NAME = "tiny"
VOCAB_SIZE = 512
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
)

# Architecture parameters, per kind. Kept as plain data so that planners/tests can read them
# without torch.
HYBRID_PARAMS: dict = {
    "architecture": "Qwen3NextForCausalLM",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "decoder_sparse_step": 1,
    "max_position_embeddings": 4096,
    "rope_theta": 10000000.0,
    "partial_rotary_factor": 0.25,
    "initializer_range": 0.1,
    "dtype": "bfloat16",
}
DENSE_PARAMS: dict = {
    "architecture": "Qwen3ForCausalLM",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "initializer_range": 0.1,
    "dtype": "bfloat16",
}
# Qwen3.5's own architecture: the same hybrid text stack (Gated DeltaNet x3 + gated attention,
# MoE) inside the multimodal wrapper the real checkpoints use, with a minimal vision tower. It is
# served with --language-model-only, as the seed serves Qwen3.5-397B: the tower is never run.
QWEN35_PARAMS: dict = {
    **{k: v for k, v in HYBRID_PARAMS.items() if k != "architecture"},
    "architecture": "Qwen3_5MoeForConditionalGeneration",
    "vision": {
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "num_position_embeddings": 64,
    },
}
# A real-size Qwen3.5-35B-A3B, configuration only (no weights: it is served with --load-format
# dummy, which allocates and fills every tensor at its real size). The text model's dimensions are
# recipectl's built-in spec of the published model (recipectl/models/builtin.py cites its sources),
# so what the engine sizes at start-up can be held against `recipectl plan`. The vision tower is a
# stub: --language-model-only never builds it.
QWEN35_35B_A3B_PARAMS: dict = {
    "architecture": "Qwen3_5MoeForConditionalGeneration",
    "config_only": True,
    "vocab_size": 248320,
    "hidden_size": 2048,
    "intermediate_size": 512,
    "num_hidden_layers": 40,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 10,
    "partial_rotary_factor": 0.25,
    "max_position_embeddings": 262144,
    "rope_theta": 10000000.0,
    "initializer_range": 0.02,
    "dtype": "bfloat16",
    "mamba_ssm_dtype": "float32",
    "vision": QWEN35_PARAMS["vision"],
}
# A real-size Qwen3.5-9B (dense: Qwen3_5ForConditionalGeneration), configuration only (served with
# --load-format dummy), from recipectl's built-in spec of the published model: 18 GB of bf16
# weights, so that prefill and decode fit on one H200 with room for their caches.
QWEN35_9B_PARAMS: dict = {
    "architecture": "Qwen3_5ForConditionalGeneration",
    "config_only": True,
    "vocab_size": 248320,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 8,
    "partial_rotary_factor": 0.25,
    "max_position_embeddings": 262144,
    "rope_theta": 10000000.0,
    "initializer_range": 0.02,
    "dtype": "bfloat16",
    "mamba_ssm_dtype": "float32",
    "vision": QWEN35_PARAMS["vision"],
}
# The qwen35 kind's tiny dimensions with Qwen3.5's real vocabulary (248,320), configuration only
# (--load-format dummy): everything but the sampler's max_num_seqs x vocab copies is negligible, so
# its start-up isolates the planner's sampler term (scripts/gpu-memory-configs.txt). The tokenizer
# stays the small one: ids past it are never produced by it, only by the dummy sampler run.
QWEN35_VOCAB_PARAMS: dict = {**QWEN35_PARAMS, "config_only": True, "vocab_size": QWEN35_35B_A3B_PARAMS["vocab_size"]}
KINDS = {
    "hybrid": HYBRID_PARAMS,
    "dense": DENSE_PARAMS,
    "qwen35": QWEN35_PARAMS,
    "qwen35-35b-a3b": QWEN35_35B_A3B_PARAMS,
    "qwen35-vocab": QWEN35_VOCAB_PARAMS,
    "qwen35-9b": QWEN35_9B_PARAMS,
}
QWEN35_KINDS = ("qwen35", "qwen35-35b-a3b", "qwen35-vocab", "qwen35-9b")  # the multimodal wrapper and its vision tokens
# Multimodal placeholder tokens the qwen35 kind's tokenizer adds (their ids must exist in the vocab).
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

_WORDS = (
    "the quick brown fox jumps over the lazy dog while a small model serves tokens on a cpu "
    "prefill decode cache transfer block layer attention linear state hybrid expert router "
    "request response stream batch sequence prompt output input memory kernel graph compile "
    "schedule question answer number total each more than half twice three four five hello world"
).split()


def stamp_for(kind: str, seed: int) -> dict:
    """The parameters a model directory is stamped with (and compared against)."""
    return {
        "generator": "recipectl.tinymodel",
        "version": GENERATOR_VERSION,
        "kind": kind,
        "seed": seed,
        "params": KINDS[kind],
    }


def is_current(out: Path, kind: str, seed: int) -> bool:
    """True when ``out`` holds a complete model made with these parameters."""
    stamp = out / STAMP_NAME
    try:
        found = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    if found != stamp_for(kind, seed):
        return False
    needed = ["config.json", "tokenizer.json", "tokenizer_config.json"]
    if not KINDS[kind].get("config_only"):
        needed.append("model.safetensors")
    return all((out / n).is_file() for n in needed)


def _corpus() -> list[str]:
    n = len(_WORDS)
    lines = [" ".join(_WORDS[(i * 7 + j) % n] for j in range(24)) for i in range(300)]
    lines += [
        "hello world, this is a tiny test model for vllm serving.",
        "Question: how many tokens? Answer: 42",
        "0123456789 " * 8,
        "The Quick Brown Fox. A, B; C: D! E? (F) [G] {H} 'I' \"J\" - + * / = % $ # @ & _ ~ ` ^ | \\",
    ]
    return lines


def _build_tokenizer(eos: str = "<|endoftext|>", extra_special: tuple[str, ...] = ()):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS + list(extra_special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=eos)
    hf.chat_template = CHAT_TEMPLATE
    if len(hf) > VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {len(hf)} tokens > vocab_size {VOCAB_SIZE}")
    return hf


def _build_config(kind: str, eos_id: int, vision_ids: dict[str, int]):  # vision_ids: {} for a text-only kind
    p = KINDS[kind]
    common = dict(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["num_hidden_layers"],
        num_attention_heads=p["num_attention_heads"],
        num_key_value_heads=p["num_key_value_heads"],
        head_dim=p["head_dim"],
        max_position_embeddings=p["max_position_embeddings"],
        initializer_range=p["initializer_range"],
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    hybrid = dict(
        linear_conv_kernel_dim=p.get("linear_conv_kernel_dim"),
        linear_key_head_dim=p.get("linear_key_head_dim"),
        linear_value_head_dim=p.get("linear_value_head_dim"),
        linear_num_key_heads=p.get("linear_num_key_heads"),
        linear_num_value_heads=p.get("linear_num_value_heads"),
        moe_intermediate_size=p.get("moe_intermediate_size"),
        shared_expert_intermediate_size=p.get("shared_expert_intermediate_size"),
        num_experts_per_tok=p.get("num_experts_per_tok"),
        num_experts=p.get("num_experts"),
        layer_types=list(p.get("layer_types", [])),
        rope_parameters={
            "rope_type": "default",
            "rope_theta": p["rope_theta"],
            "partial_rotary_factor": p.get("partial_rotary_factor", 1.0),
        },
    )
    if kind in QWEN35_KINDS:
        from transformers import Qwen3_5Config, Qwen3_5MoeConfig

        moe = p["architecture"].startswith("Qwen3_5Moe")
        text = {k: v for k, v in common.items() if moe is False or k != "intermediate_size"}
        layers = {k: v for k, v in hybrid.items() if v is not None}  # a dense model has no experts
        v = p["vision"]
        cfg = (Qwen3_5MoeConfig if moe else Qwen3_5Config)(
            text_config={**text, **layers},
            vision_config={
                **{k: val for k, val in v.items()},
                "out_hidden_size": p["hidden_size"],
                "initializer_range": p["initializer_range"],
            },
            image_token_id=vision_ids["<|image_pad|>"],
            video_token_id=vision_ids["<|video_pad|>"],
            vision_start_token_id=vision_ids["<|vision_start|>"],
            vision_end_token_id=vision_ids["<|vision_end|>"],
            tie_word_embeddings=False,
        )
        cfg.text_config.dtype = p["dtype"]
        if p.get("mamba_ssm_dtype"):
            cfg.text_config.mamba_ssm_dtype = p["mamba_ssm_dtype"]
    elif kind == "hybrid":
        from transformers import Qwen3NextConfig

        cfg = Qwen3NextConfig(**common, **hybrid, decoder_sparse_step=p["decoder_sparse_step"])
    else:
        from transformers import Qwen3Config

        cfg = Qwen3Config(
            **common,
            rope_parameters={"rope_type": "default", "rope_theta": p["rope_theta"]},
        )
    cfg.architectures = [p["architecture"]]
    cfg.dtype = p["dtype"]
    return cfg


def _build_into(tmp: Path, kind: str, seed: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM

    extra = tuple(VISION_TOKENS) if kind in QWEN35_KINDS else ()
    tokenizer = _build_tokenizer(extra_special=extra)
    vision_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in extra}
    cfg = _build_config(kind, tokenizer.eos_token_id, vision_ids)
    if KINDS[kind].get("config_only"):
        cfg.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        print(
            f"recipectl.tinymodel: {kind} {KINDS[kind]['architecture']}, configuration only "
            "(serve with --load-format dummy)",
            file=sys.stderr,
        )
        return

    torch.manual_seed(seed)
    # Initialise in float32 on the CPU (deterministic), then cast to bf16.
    if kind == "qwen35":
        from transformers import Qwen3_5MoeForConditionalGeneration

        model = Qwen3_5MoeForConditionalGeneration._from_config(cfg, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # Zero the output rows of the special tokens: their logit is then exactly 0 while the
    # largest of the ~500 random logits is positive, so greedy decoding never emits EOS and
    # every completion runs to max_tokens (a random model otherwise stops early at random).
    with torch.no_grad():
        special_ids = sorted(tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS + list(extra)))
        model.get_output_embeddings().weight[special_ids] = 0
    model = model.to(torch.bfloat16).eval()
    model.config.dtype = "bfloat16"
    if model.generation_config is not None:
        model.generation_config.bos_token_id = tokenizer.eos_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.eos_token_id

    model.save_pretrained(tmp, safe_serialization=True, max_shard_size="10GB")
    tokenizer.save_pretrained(tmp)
    n_params = sum(t.numel() for t in model.parameters())
    print(
        f"recipectl.tinymodel: {kind} {KINDS[kind]['architecture']}, {n_params:,} parameters, "
        f"vocab {len(tokenizer)}, seed {seed}",
        file=sys.stderr,
    )


def make(out: str | os.PathLike, kind: str = "hybrid", seed: int = 0, force: bool = False) -> Path:
    """Create (or reuse) the tiny model in ``out``; return its path."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {sorted(KINDS)}")
    out = Path(out).expanduser().resolve()
    if not force and is_current(out, kind, seed):
        return out
    if out.exists() and any(out.iterdir()) and not (out / STAMP_NAME).exists():
        raise FileExistsError(f"{out} is not empty and was not made by recipectl.tinymodel; refusing to overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _build_into(tmp, kind, seed)
        (tmp / STAMP_NAME).write_text(json.dumps(stamp_for(kind, seed), indent=1, sort_keys=True) + "\n")
        # mkdtemp makes a 0700 directory; make the result readable like a normal download.
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m recipectl.tinymodel",
        description="Generate a tiny random-weight model (run with the engine's Python).",
    )
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--kind", choices=sorted(KINDS), default="hybrid")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="rebuild even if DIR is current")
    args = ap.parse_args(argv)
    try:
        path = make(args.out, args.kind, args.seed, force=args.force)
    except (FileExistsError, ValueError) as e:
        print(f"recipectl.tinymodel: error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
