"""The hardware a recipe runs on: the GPU types recipectl knows, the cluster section (nodes, hosts,
GPUs per node) and a role's parallel layout (TP, DP, expert parallel; DEP8-style shorthands)."""

# No `from __future__ import annotations`: pydantic reads the annotations at class creation.

import re
from enum import Enum
from typing import Any

from pydantic import Field, field_validator, model_validator

from .fieldtypes import Number, SchemaValueError, Strict, Whole, is_host


# -------------------------------------------------------------------------------------- cluster
class GpuType(str, Enum):
    GB200 = "GB200"
    B200 = "B200"
    H200 = "H200"
    H100 = "H100"
    CPU = "CPU"

    @property
    def family(self) -> str:
        return {"GB200": "blackwell", "B200": "blackwell", "H200": "hopper", "H100": "hopper"}.get(self.value, "cpu")


class ClusterSection(Strict):
    gpu: GpuType
    # Upper bounds well past any real machine: a typo such as 40000000 must be an error, not a
    # placement that allocates a list per GPU.
    gpus_per_node: Whole = Field(4, ge=0, le=128)
    nodes: Whole = Field(1, ge=1, le=4096)
    hosts: list[str] | None = Field(None, description="host names/IPs, one per node (bash target)")
    cpus_per_node: Whole | None = Field(None, ge=1, le=1 << 16, description="CPU platform: cores per host")
    memory_gib_per_node: Number | None = Field(
        None, gt=0, le=1 << 24, allow_inf_nan=False, description="CPU platform: host memory"
    )

    @field_validator("hosts")
    @classmethod
    def _hosts_are_names_or_addresses(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        seen: set[str] = set()
        for host in v:
            if not is_host(host):
                raise SchemaValueError(
                    f"{host!r} is not a host name or IP address",
                    fix="write a DNS name such as gpu-node-1.example or an address such as 10.0.0.7",
                )
            key = host.lower()
            if key in seen:
                raise SchemaValueError(
                    f"host {host!r} is listed twice", fix="list each node once (nodes: the number of distinct hosts)"
                )
            seen.add(key)
        return v

    @model_validator(mode="after")
    def _hosts_match_nodes(self) -> "ClusterSection":
        if self.hosts is not None and len(self.hosts) != self.nodes:
            raise SchemaValueError(
                f"{len(self.hosts)} host(s) listed for {self.nodes} node(s)",
                fix="list one host per node, or set nodes to the number of hosts",
            )
        if self.gpu is not GpuType.CPU and self.gpus_per_node < 1:
            raise SchemaValueError("a GPU cluster needs gpus_per_node >= 1")
        return self

    @property
    def host_names(self) -> list[str]:
        return list(self.hosts) if self.hosts else [f"node{i}" for i in range(self.nodes)]

    @property
    def is_cpu(self) -> bool:
        return self.gpu is GpuType.CPU


# ----------------------------------------------------------------------------------- parallelism
_PAR_TOKEN = re.compile(r"(DEP|TP|DP|EP)(\d+)", re.I)


class Parallelism(Strict):
    tp: Whole = Field(1, ge=1, le=1024, description="tensor parallel size")
    dp: Whole = Field(1, ge=1, le=4096, description="data parallel size")
    expert_parallel: bool = Field(False, description="--enable-expert-parallel (EP size = TP x DP)")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """Accept DEP8 (DP 8 + expert parallel), TP4, DP2, and combinations such as TP2-DEP4."""
        if isinstance(value, str):
            text = value.strip().replace(" ", "")
            tokens = _PAR_TOKEN.findall(text)
            rest = _PAR_TOKEN.sub("", text).strip("-+x_")
            if not tokens or rest:
                raise SchemaValueError(
                    f"'{value}' is not a parallel layout",
                    fix="write DEP8, TP4, DP2, TP2-DEP4, or {tp: 1, dp: 8, expert_parallel: true}",
                )
            out: dict[str, Any] = {}
            for kind, num in tokens:
                kind = kind.upper()
                n = int(num)
                if kind == "TP":
                    out["tp"] = n
                elif kind == "DP":
                    out["dp"] = n
                elif kind == "DEP":
                    out["dp"] = n
                    out["expert_parallel"] = True
                elif kind == "EP":  # EPn: experts over n ranks made of DP ranks
                    out.setdefault("dp", n)
                    out["expert_parallel"] = True
            return out
        return value

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def ep_size(self) -> int:
        return self.tp * self.dp if self.expert_parallel else 1

    @property
    def label(self) -> str:
        if self.expert_parallel:
            return f"DEP{self.dp}" + (f"-TP{self.tp}" if self.tp > 1 else "")
        parts = []
        if self.tp > 1 or self.dp == 1:
            parts.append(f"TP{self.tp}")
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        return "-".join(parts)


# ------------------------------------------------------------------------------------ GPU facts
class GpuFacts(Strict):
    """What the planner needs to know about one GPU kind.

    ``driver_memory_bytes``: the total nvidia-smi reports. ``engine_memory_bytes``: the total
    vLLM sizes from, ``torch.accelerator.get_memory_info()`` (cudaMemGetInfo) as read by
    ``MemorySnapshot.measure`` (vllm/utils/mem_utils.py) and multiplied by
    ``gpu_memory_utilization`` in ``request_memory`` (vllm/v1/worker/utils.py); ``None`` where it
    has not been measured (the planner then uses the driver's figure, which overstates it).
    ``sm_count``: streaming multiprocessors (the sampler's Triton top-k/top-p buffer has one row
    per SM, up to the batch size)."""

    driver_memory_bytes: int
    engine_memory_bytes: int | None = None
    sm_count: int

    @property
    def memory_bytes(self) -> int:
        return self.engine_memory_bytes or self.driver_memory_bytes


GPU_FACTS: dict[GpuType, GpuFacts] = {
    # NVIDIA's NVL72 figure (13.4 TB / 72 GPUs, decimal); 148 SMs per B200 die pair (NVIDIA).
    GpuType.GB200: GpuFacts(driver_memory_bytes=186 * 10**9, sm_count=148),
    GpuType.B200: GpuFacts(driver_memory_bytes=183_359 * 2**20, sm_count=148),
    # H200: nvidia-smi 143,771 MiB. What torch sees, 150,109,880,320 B (139.80 GiB), follows from
    # vLLM 0.26.0's own start-up lines on 2 x H200 (docs/gpu-evidence.md, 2026-11-30): each role
    # prints `--kv-cache-memory=` suggestions to the GPU's free memory and to the requested
    # memory; their difference is free - ceil(total x utilization), identical on both GPUs:
    # 11,456,387,481 B at 0.92 (35B-A3B) and 104,524,513,280 B at 0.3 (tiny), so
    # ceil(0.92 T) - ceil(0.3 T) = 93,068,125,799, whose only whole solutions are T =
    # 150,109,880,320 (+1); it prints as "139.8 GiB" and "128.62 GiB" requested at 0.92.
    GpuType.H200: GpuFacts(driver_memory_bytes=143_771 * 2**20, engine_memory_bytes=150_109_880_320, sm_count=132),
    GpuType.H100: GpuFacts(driver_memory_bytes=81_559 * 2**20, sm_count=132),
}
