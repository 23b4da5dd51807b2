"""The hardware a recipe runs on: the GPU types recipectl knows, the cluster section (nodes, hosts,
GPUs per node) and a role's parallel layout (TP, DP, expert parallel; DEP8-style shorthands)."""

# No `from __future__ import annotations`: pydantic reads the annotations at class creation.

import re
from enum import Enum
from typing import Any

from pydantic import Field, field_validator, model_validator

from .fieldtypes import SchemaValueError, Strict, is_host


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
    gpus_per_node: int = Field(4, ge=0, le=128)
    nodes: int = Field(1, ge=1, le=4096)
    hosts: list[str] | None = Field(None, description="host names/IPs, one per node (bash target)")
    cpus_per_node: int | None = Field(None, ge=1, le=1 << 16, description="CPU platform: cores per host")
    memory_gib_per_node: float | None = Field(None, gt=0, le=1 << 24, allow_inf_nan=False,
                                              description="CPU platform: host memory")

    @field_validator("hosts")
    @classmethod
    def _hosts_are_names_or_addresses(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        seen: set[str] = set()
        for host in v:
            if not is_host(host):
                raise SchemaValueError(f"{host!r} is not a host name or IP address",
                                       fix="write a DNS name such as gpu-node-1.example or an address such as 10.0.0.7")
            key = host.lower()
            if key in seen:
                raise SchemaValueError(f"host {host!r} is listed twice",
                                       fix="list each node once (nodes: the number of distinct hosts)")
            seen.add(key)
        return v

    @model_validator(mode="after")
    def _hosts_match_nodes(self) -> "ClusterSection":
        if self.hosts is not None and len(self.hosts) != self.nodes:
            raise SchemaValueError(f"{len(self.hosts)} host(s) listed for {self.nodes} node(s)",
                                   fix="list one host per node, or set nodes to the number of hosts")
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
    tp: int = Field(1, ge=1, le=1024, description="tensor parallel size")
    dp: int = Field(1, ge=1, le=4096, description="data parallel size")
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
                raise SchemaValueError(f"'{value}' is not a parallel layout",
                                       fix="write DEP8, TP4, DP2, TP2-DEP4, or {tp: 1, dp: 8, expert_parallel: true}")
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
