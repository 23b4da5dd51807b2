"""srt-slurm (`srtctl`) recipes with a vLLM backend.

The schema is srt-slurm's own (`src/srtctl/core/schema.py`, `src/srtctl/backends/vllm.py`):
`model` {path, container, precision}; `resources` {gpu_type, gpus_per_node, prefill_nodes,
decode_nodes, prefill_workers, decode_workers, gpus_per_prefill, gpus_per_decode};
`backend` {type: vllm, connector (default `nixl`, turned into `--kv-transfer-config` with
`kv_role: kv_both`; `null` leaves it to vllm_config), prefill_environment, decode_environment,
vllm_config {prefill, decode}: flag name -> value, where `true` passes the bare flag, `false`
nothing, a list its items}; `environment` for every process; `benchmark` {type, isl, osl,
concurrencies "64x128", random_range_ratio}; `identity.frameworks.vllm` declares the engine's
version, `identity.model` {repo, revision} the Hugging Face checkpoint srtctl checks the model
against (`IdentityModelConfig`: never passed to the engine). srtctl passes
`--data-parallel-rpc-port` itself (allocated from 8400) to a DP endpoint (DP > 1) that spans nodes.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..engine_flags import flag_json
from .common import (
    GPUS_PER_NODE,
    Imported,
    NotImportable,
    Origin,
    apply_role,
    as_env,
    gpu_type,
    model_facts,
    origin_in,
    other_backend,
    safe_name,
    set_role_env,
    yaml_documents,
)
from .flags import read_flags
from .names import SRT_SLURM
from .shapes import SrtRecipe, check
from .shellwords import Word

SRTCTL_DP_RPC_PORT = 8400  # srtctl's VLLM_DATA_PARALLEL_RPC_PORT (src/srtctl/ports.py)
CONNECTOR_PRESETS = {"nixl": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}}

# what srtctl itself consumes, never the engine
_NOT_ENGINE = (
    "slurm",
    "frontend",
    "dynamo",
    "profiling",
    "output",
    "health_check",
    "infra",
    "observability",
    "telemetry",
    "container_mounts",
    "extra_mount",
    "srun_options",
    "sbatch_directives",
    "enable_config_dump",
    "setup_script",
    "reporting",
)


def import_srt_slurm(text: str, file: str) -> Imported:
    """srt-slurm (srtctl) recipes with a vLLM backend."""
    docs = yaml_documents(text, file)
    if len(docs) != 1 or not isinstance(docs[0][0], dict):
        raise NotImportable(f"{file}: an srt-slurm recipe is one YAML mapping")
    data, pos = docs[0]
    check(SrtRecipe, data, file, pos)
    imp = Imported(SRT_SLURM, file, files=[file])

    o = origin_in(file, pos)
    backend = data.get("backend") or {}
    kind = backend.get("type") or next(
        (k.split("_")[0] for k in ("vllm_config", "sglang_config", "trtllm_config") if k in backend), None
    )
    if kind != "vllm":
        where = o("backend", "type") if "type" in backend else o("backend")
        raise other_backend(str(kind or "unstated").lower(), f"{file}:{where.line}")
    resources = data.get("resources") or {}
    if resources.get("prefill_workers") is None or resources.get("decode_workers") is None:
        raise NotImportable(
            f"{file}:{o('resources').line}: an aggregated srt-slurm recipe (no prefill_workers/"
            "decode_workers): recipectl deploys prefill/decode pairs"
        )

    imp.set(("version",), 1)
    imp.set(("name",), safe_name(str(data.get("name", "imported"))), o("name"))
    _model_and_engine(imp, data, o)
    gpn = _cluster(imp, resources, file, o)

    vllm_config = backend.get("vllm_config") or {}
    shared_connector = backend.get("connector", "nixl")
    for role in ("prefill", "decode"):
        workers = int(resources.get(f"{role}_workers") or 0)
        imp.set((role, "endpoints"), max(1, workers), o("resources", f"{role}_workers"))
        for key, value in (backend.get(f"{role}_environment") or {}).items():
            set_role_env(imp, role, str(key), value, o("backend", f"{role}_environment", key))
        cfg = vllm_config.get(role) or {}
        words = _words(cfg, pos, ("backend", "vllm_config", role), file)
        flags = read_flags(words, positional_model=False)
        if "connector" in cfg:
            connector, conn_origin = cfg["connector"], o("backend", "vllm_config", role, "connector")
        else:
            connector, conn_origin = (
                shared_connector,
                o("backend", "connector")
                if "connector" in backend
                else o("backend", note="srt-slurm's default connector: nixl"),
            )
        if flags.kv_config is None and connector not in (None, "null", "none"):
            flags.kv_config = (
                _connector_config(connector, conn_origin),
                Word(str(connector), conn_origin.line, conn_origin.col),
            )
        apply_role(imp, role, flags, file, endpoint_origin=o("backend", "vllm_config", role))
        explicit_gpus = resources.get(f"gpus_per_{role}")
        par = imp.get((role, "parallel"), {})
        if explicit_gpus and int(explicit_gpus) != par.get("tp", 1) * par.get("dp", 1):
            imp.drop(
                o("resources", f"gpus_per_{role}"),
                f"gpus_per_{role}: {explicit_gpus}",
                f"recipectl gives each endpoint TP x DP = {par.get('tp', 1) * par.get('dp', 1)} GPUs",
            )
        # srtctl gives a DP endpoint that spans nodes an RPC port of its own (allocated per
        # process from 8400 unless the recipe sets one); TP over nodes, DP 1, gets none
        spans = par.get("tp", 1) * par.get("dp", 1) > gpn
        if spans and par.get("dp", 1) > 1 and imp.get((role, "data_parallel_rpc_port")) is None:
            imp.set(
                (role, "data_parallel_rpc_port"),
                SRTCTL_DP_RPC_PORT,
                o(
                    "backend",
                    "vllm_config",
                    role,
                    note="srtctl passes --data-parallel-rpc-port (from 8400) to a DP endpoint that spans nodes",
                ),
            )
    for key in _NOT_ENGINE:
        if key in data:
            imp.drop(o(key), key, "srt-slurm's own orchestration: recipectl renders its own")
    _benchmark(imp, data.get("benchmark") or {}, o)
    return imp


def _model_and_engine(imp: Imported, data: dict, o: Callable[..., Origin]) -> None:
    """model.path (hf: stripped), its precision, the container image, the vLLM version and the
    environment every process gets.

    srtctl's model.path is `hf:` and a Hugging Face id, or else a directory on the cluster
    (`deepseekv4-fp4`: an alias its srtslurm.yaml `model_paths` resolves), mounted at /model:
    that directory names no model anywhere else. Where the recipe's identity names the checkpoint
    (`identity.model.repo`), that is the model; `hf:` is what the engine loads, and stays."""
    model = data.get("model") or {}
    identity = (data.get("identity") or {}).get("model") or {}
    raw = str(model.get("path", ""))
    repo = str(identity["repo"]) if identity.get("repo") is not None else ""
    if raw.startswith("hf:"):
        path, origin = raw[3:], o("model", "path", text=raw)
    elif repo:
        path = repo
        origin = o(
            "identity",
            "model",
            "repo",
            text=repo,
            note=f"model.path {raw!r} is a directory on srt-slurm's cluster: the checkpoint is identity.model.repo",
        )
        imp.drop(
            o("model", "path"),
            f"model.path: {raw}",
            "a directory on srt-slurm's cluster (an alias its srtslurm.yaml model_paths resolves, or a path), "
            "mounted at /model; the model is identity.model.repo",
        )
    else:
        path, origin = raw, o("model", "path", text=raw)
    imp.set(("model", "path"), path, origin)
    if identity.get("revision") is not None:
        imp.drop(
            o("identity", "model", "revision"),
            f"identity.model.revision: {identity['revision']}",
            "srtctl checks the checkpoint it finds against it; recipectl pins no revision "
            "(vLLM's --revision in each role's extra_args does)",
        )
    precision = str(model.get("precision", "")).lower()
    quant = {"nvfp4": "nvfp4", "fp4": "nvfp4", "fp8": "fp8", "bf16": "bf16", "bfloat16": "bf16"}.get(precision)
    if quant:
        imp.set(("model", "quantization"), quant, o("model", "precision"))
    elif precision:
        imp.drop(o("model", "precision"), f"model.precision: {model.get('precision')}", "no recipectl quantization")
    model_facts(imp, path, origin)
    if model.get("container"):
        imp.set(("engine", "image"), str(model["container"]), o("model", "container"))
    vllm_version = ((data.get("identity") or {}).get("frameworks") or {}).get("vllm")
    if vllm_version:
        imp.set(("engine", "vllm_version"), str(vllm_version), o("identity", "frameworks", "vllm"))
    imp.at(("engine",), o("model", "container") if model.get("container") else o("model"))
    for key, value in (data.get("environment") or {}).items():
        imp.set(("engine", "env", str(key)), as_env(value), o("environment", key))


def _cluster(imp: Imported, resources: dict, file: str, o: Callable[..., Origin]) -> int:
    """The cluster section from srt-slurm's resources; the GPUs per node."""
    gpu_name = str(resources.get("gpu_type", ""))
    gpu, note = gpu_type(gpu_name)
    if gpu is None:
        raise NotImportable(
            f"{file}:{o('resources', 'gpu_type').line}: gpu_type {gpu_name!r}: recipectl knows GB200, B200, H200, H100"
        )
    imp.set(("cluster", "gpu"), gpu, o("resources", "gpu_type", note=note))
    if note:
        imp.drop(o("resources", "gpu_type"), f"gpu_type: {gpu_name}", note)
    gpn = int(resources.get("gpus_per_node", GPUS_PER_NODE.get(gpu, 4)))
    imp.set(
        ("cluster", "gpus_per_node"),
        gpn,
        o("resources", "gpus_per_node")
        if "gpus_per_node" in resources
        else o("resources", note="srt-slurm's default gpus_per_node"),
    )
    nodes = int(resources.get("prefill_nodes") or 0) + int(resources.get("decode_nodes") or 0)
    imp.set(("cluster", "nodes"), max(1, nodes), o("resources", "prefill_nodes", note="prefill_nodes + decode_nodes"))
    return gpn


def _words(cfg: dict, pos: dict, base: tuple, file: str) -> list[Word]:
    """vllm_config as srtctl turns it into a command line: `--key value`, `true` the bare flag,
    `false` nothing, a list its items, each word at the key's line."""
    words: list[Word] = []
    for key, value in cfg.items():
        if key == "connector":
            continue
        line, col = pos.get(base + (key,), pos[()])
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            if value:
                words.append(Word(flag, line, col))
            continue
        if value is None:
            continue
        words.append(Word(flag, line, col))
        items = value if isinstance(value, list) else [value]
        for item in items:
            words.append(Word(json.dumps(item) if isinstance(item, dict) else str(item), line, col))
    return words


def _connector_config(connector: Any, origin: Origin) -> dict:
    if isinstance(connector, str) and connector.lower() in CONNECTOR_PRESETS:
        return dict(CONNECTOR_PRESETS[connector.lower()])
    if isinstance(connector, dict):
        return connector
    try:
        value = flag_json(str(connector))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        shown = repr(connector) if len(repr(connector)) <= 60 else repr(connector)[:60] + "..."
        raise NotImportable(f"{origin.file}:{origin.line}: connector {shown}: recipectl deploys NIXL only")
    return value


# sa-bench's own defaults (src/srtctl/benchmarks/sa_bench.py)
SA_BENCH_RANGE_RATIO = 0.8
# benchmark keys recipectl's workload or checks carry; every other key is listed as not carried
_BENCH_CARRIED = {"type", "isl", "osl", "concurrencies", "random_range_ratio", "num_prompts_mult", "num_shots"}


_NOT_CARRIED_WHY = {
    "repeat": "recipectl's GSM8K check runs once per `recipectl doctor`",
    "req_rate": "recipectl's bench sends at each concurrency level without a rate limit",
    "num_warmup_mult": "recipectl's bench warms up with its own requests",
    "use_chat_template": "sa-bench subtracts the chat template's tokens from ISL; recipectl's workload counts the "
    "prompt as sent",
}


def _benchmark(imp: Imported, bench: dict, o) -> None:
    """srt-slurm's benchmark, in recipectl's terms where they mean the same, listed where not.

    sa-bench draws each request's input and output lengths uniformly from [int(ratio x L), L]
    (benchmark_serving.py's sample_random_requests; ratio 0.8 unless the recipe says), where
    recipectl's workload, like vLLM's random dataset, draws from [L' x (1 - r), L' x (1 + r)]. The
    same range is L' = L x (1 + ratio) / 2 and r = (1 - ratio) / (1 + ratio): ratio 1.0 is fixed
    lengths (r = 0), 0.8 is a mean of 0.9 L with the longest request at L. An accuracy run states no
    throughput workload, and the recipe gets none: no placeholder for rules to judge."""
    kind = str(bench.get("type", ""))
    isl, osl = bench.get("isl"), bench.get("osl")
    if isl and osl and kind in ("", "sa-bench"):
        given = bench.get("random_range_ratio")
        ratio = float(SA_BENCH_RANGE_RATIO if given is None else given)  # null: sa-bench's default
        if not 0 < ratio <= 1:
            raise NotImportable(
                f"{o('benchmark', 'random_range_ratio').file}:"
                f"{o('benchmark', 'random_range_ratio').line}: random_range_ratio {ratio}: sa-bench "
                "draws lengths from [ratio x ISL, ISL], so it lies in (0, 1]"
            )
        note = (
            f"sa-bench's lengths lie in [{ratio:g} x L, L]: a mean of {(1 + ratio) / 2:g} x L, "
            f"+/-{(1 - ratio) / (1 + ratio):.4f} in recipectl's terms"
        )
        where_ratio = (
            o("benchmark", "random_range_ratio", note=note)
            if given is not None
            else o("benchmark", note=note + f" (sa-bench's default ratio {SA_BENCH_RANGE_RATIO})")
        )
        imp.set(("workload", "isl"), round(int(isl) * (1 + ratio) / 2), o("benchmark", "isl", note=note))
        imp.set(("workload", "osl"), round(int(osl) * (1 + ratio) / 2), o("benchmark", "osl", note=note))
        imp.set(("workload", "random_range_ratio"), round((1 - ratio) / (1 + ratio), 6), where_ratio)
        conc = bench.get("concurrencies")
        if isinstance(conc, str):
            levels = [int(c) for c in conc.replace(",", "x").split("x") if c.strip().isdigit()]
        elif isinstance(conc, list):
            levels = [int(c) for c in conc]
        elif isinstance(conc, int):
            levels = [conc]
        else:
            levels = []
        if levels:
            imp.set(("workload", "concurrency"), levels, o("benchmark", "concurrencies"))
        if bench.get("num_prompts_mult") is not None:
            imp.set(
                ("workload", "prompts_per_concurrency"),
                int(bench["num_prompts_mult"]),
                o("benchmark", "num_prompts_mult"),
            )
    elif bench:
        imp.drop(
            o("benchmark"),
            "workload",
            f"benchmark type {kind or 'unstated'} states no throughput workload: "
            "the recipe has none (add workload: {isl, osl, concurrency} to plan or bench one)",
        )
    if kind == "gsm8k":
        imp.set(("checks", "gsm8k", "enabled"), True, o("benchmark", "type"))
        if bench.get("num_shots") is not None:
            imp.set(("checks", "gsm8k", "num_shots"), int(bench["num_shots"]), o("benchmark", "num_shots"))
    elif kind and kind != "sa-bench":
        imp.drop(o("benchmark", "type"), f"benchmark.type: {kind}", "recipectl's bench runs vllm bench serve")
    for key, value in bench.items():
        if key in _BENCH_CARRIED:
            continue
        why = _NOT_CARRIED_WHY.get(key, "srt-slurm's benchmark option: recipectl's bench has no such setting")
        imp.drop(o("benchmark", key), f"benchmark.{key}: {value}", why)
