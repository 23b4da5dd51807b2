"""GPUs on this host, through NVML (nvidia-ml-py) when installed, else `nvidia-smi`."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int

    @property
    def family(self) -> str:
        n = self.name.upper()
        if any(k in n for k in ("GB200", "B200", "B100", "GB300", "B300", "RTX PRO 6000 BLACKWELL")):
            return "blackwell"
        if any(k in n for k in ("H100", "H200", "H20", "GH200", "H800")):
            return "hopper"
        if "A100" in n or "A10" in n or "A800" in n:
            return "ampere"
        return "other"


def query_gpus() -> list[Gpu] | None:
    """None when no NVIDIA driver is reachable; [] when the driver sees no GPU."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                name = name.decode() if isinstance(name, bytes) else name
                out.append(Gpu(i, name, pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)))
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: fall back to nvidia-smi
        pass
    if not shutil.which("nvidia-smi"):
        return None
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    gpus = []
    for line in res.stdout.strip().splitlines():
        idx, name, mem = (x.strip() for x in line.split(","))
        gpus.append(Gpu(int(idx), name, int(float(mem))))
    return gpus
