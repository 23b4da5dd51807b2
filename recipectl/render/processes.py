"""The deployment as typed processes: for every endpoint process and the router, its argv,
its environment and where it runs. Every target renders from this one list, so the bash script,
the sbatch script, the manifests and `recipectl launch` start exactly the same commands."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..effective import Setting, Source, pipeline_stages, resolve_role
from ..engine_flags import BY_FIELD, Arity, flag_for
from ..engine_versions import fmt_version, gdn_backends_for
from ..errors import RecipectlError
from ..schema import Recipe, RoleSection
from ..topology import Placement, Process, parse_cores, place, wide_tensor_parallel
from .values import NodeAddress, UrlOf, Value, parse_env_value, path_value

# the engine binds a CPU endpoint's OpenMP threads to these cores (a list per rank, "|" between)
OMP_BIND = "VLLM_CPU_OMP_THREADS_BIND"


def bound_cores(env: Mapping[str, object]) -> frozenset[int] | None:
    """The cores an endpoint's environment binds it to (VLLM_CPU_OMP_THREADS_BIND: every rank's
    list, "|" between ranks, together: a thread of one rank on another rank's cores is on the
    endpoint's, and moving it to the first rank's would put two ranks on one core), or None where
    it binds none (unset, auto, nobind, not a plain value, or unreadable)."""
    value = env.get(OMP_BIND, "")
    if not isinstance(value, str):
        return None
    try:
        return frozenset().union(*(parse_cores(rank) for rank in value.split("|"))) or None
    except ValueError:
        return None


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a deployment: its command line, environment, node and port."""

    name: str  # prefill-0, decode-0-node3, router
    kind: str  # prefill | decode | router
    node: int
    host: str
    argv: tuple[Value, ...]
    env: tuple[tuple[str, Value], ...]
    port: int | None  # HTTP port it serves (None for headless followers)
    gpus: tuple[int, ...] = ()
    headless: bool = False
    endpoint: int = 0


@dataclass
class Deployment:
    """Every process a recipe starts, and where its endpoints are placed."""

    recipe: Recipe
    placement: Placement
    processes: list[ProcessSpec] = field(default_factory=list)

    @property
    def workers(self) -> list[ProcessSpec]:
        return [p for p in self.processes if p.kind != "router"]

    @property
    def router(self) -> ProcessSpec:
        return next(p for p in self.processes if p.kind == "router")

    @property
    def nodes_used(self) -> list[int]:
        return sorted({p.node for p in self.processes})

    def on_node(self, node: int) -> list[ProcessSpec]:
        return [p for p in self.processes if p.node == node]


def engine_program(recipe: Recipe, command: list[str]) -> list[Value]:
    """With engine.venv, the engine's programs are called by their path in that venv, so every
    target (bash, Slurm steps, the local launcher) runs the same binary without PATH games."""
    venv = recipe.engine.venv
    if venv and command and "/" not in command[0]:
        return [path_value(f"{venv.rstrip('/')}/bin/{command[0]}"), *command[1:]]
    return list(command)


# The typed fields recipectl renders, in the order they appear on the command line; the spelling
# of each comes from recipectl.engine_flags, which also reads them back out of extra_args.
_TYPED_FIELDS = (
    "dtype",
    "load_format",
    "trust_remote_code",
    "language_model_only",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "gpu_memory_utilization",
    "async_scheduling",
    "mamba_ssm_cache_dtype",
    "mamba_cache_dtype",
    "kv_cache_dtype",
    "block_size",
    "attention_backend",
)
_TYPED_FIELDS_AFTER_GDN = (
    "stream_interval",
    "api_server_count",
    "enable_prefix_caching",
    "disable_hybrid_kv_cache_manager",
    "speculative_config",
    "max_cudagraph_capture_size",
    "enforce_eager",
    "all2all_backend",
    "enable_eplb",
)


def _field_flag(argv: list, field: str, setting: Setting) -> None:
    """Render a field the recipe sets (an engine default or an extra_args value renders nothing
    here: the former is the engine's, the latter follows verbatim)."""
    if setting.source is not Source.RECIPE:
        return
    flag = BY_FIELD[field]
    value = setting.value
    if flag.arity is Arity.BOOL:
        # only-true switches render nothing when false, as before (a false store_true is the default)
        if value is False and field in ("trust_remote_code", "language_model_only", "enforce_eager", "enable_eplb"):
            return
        argv.append(flag.flag if value else "--no-" + flag.flag[2:])
    elif field == "speculative_config":
        argv += [flag.flag, json.dumps(value, separators=(",", ":"))]
    else:
        argv += [flag.flag, str(value)]


def bind_address(recipe: Recipe, host: str) -> str:
    """Where a server listens: the host the recipe names (127.0.0.1 stays loopback, a node's name
    its own interface); every interface only when the hosts are not known until the job runs."""
    return host if recipe.cluster.hosts else "0.0.0.0"


def _flag(argv: list, name: str, value) -> None:
    if value is None:
        return
    argv += [name, str(value)]


def kv_transfer_json(recipe: Recipe, role: str) -> str:
    kv = recipe.kv_transfer
    spec: RoleSection = recipe.roles[role]
    device = kv.buffer_device or ("cpu" if recipe.cluster.is_cpu else "cuda")
    config = {
        "kv_connector": kv.connector,
        "kv_role": spec.effective_kv_role,  # type: ignore[attr-defined]
        "kv_buffer_device": device,
        "kv_connector_extra_config": {"backends": list(kv.backends), **kv.extra_config},
    }
    if "load_failure_policy" in kv.model_fields_set:  # the recipe's own choice; else vLLM's default stands
        config["kv_load_failure_policy"] = kv.load_failure_policy
    return json.dumps(config, separators=(",", ":"), sort_keys=False)


def serve_argv(recipe: Recipe, proc: Process, placement: Placement) -> list[Value]:
    """The `vllm serve` command line of one process, every flag from a typed field."""
    spec = recipe.roles[proc.role]
    eff = resolve_role(recipe, proc.role)
    model = recipe.model
    version = recipe.engine.version
    argv: list[Value] = [*engine_program(recipe, recipe.engine.serve_command), path_value(model.path)]
    _flag(argv, "--served-model-name", model.name)
    if not proc.headless:
        argv += ["--host", bind_address(recipe, proc.host), "--port", str(proc.http_port)]
    par = spec.parallel
    if par.tp > 1:
        _flag(argv, "--tensor-parallel-size", par.tp)
    if par.dp > 1:
        _flag(argv, "--data-parallel-size", par.dp)
        endpoint = next(e for e in placement.role(proc.role) if e.index == proc.endpoint)
        if endpoint.multi_node:
            _flag(argv, "--data-parallel-size-local", proc.dp_local)
            # Followers only. vLLM takes a start rank on a process that is not --headless for
            # hybrid load balancing (0.32: `data_parallel_start_rank is not None`, so even 0), and
            # then refuses the headless followers: "Remote engine 4 must not use --headless in
            # external or hybrid dp lb mode" (seen on the two-node test cluster). The leader's
            # rank is 0, vLLM's default, as in vLLM's own multi-node example.
            if proc.headless:
                _flag(argv, "--data-parallel-start-rank", proc.dp_start_rank)
            argv += ["--data-parallel-address", NodeAddress(endpoint.leader.node)]
            _flag(argv, "--data-parallel-rpc-port", spec.data_parallel_rpc_port)
            if proc.headless:
                argv.append("--headless")
    if par.expert_parallel:
        argv.append("--enable-expert-parallel")
    for name in _TYPED_FIELDS:
        _field_flag(argv, name, eff[name])
    backend = spec.gdn_prefill_backend
    if backend not in (None, "auto"):  # 'auto' is vLLM's own default: no flag
        accepted = gdn_backends_for(version)
        if accepted is None or backend not in accepted:
            raise RecipectlError(
                f"vLLM {fmt_version(version)} does not accept --gdn-prefill-backend {backend} ({proc.role})",
                fix="recipectl validate explains it (VER004); set gdn_prefill_backend: auto",
            )
        _flag(argv, flag_for("gdn_prefill_backend"), backend)
    for name in _TYPED_FIELDS_AFTER_GDN:
        _field_flag(argv, name, eff[name])
    argv += [flag_for("kv_transfer_config"), kv_transfer_json(recipe, proc.role)]
    argv += extra_args_values(spec.extra_args)
    return argv


def extra_args_values(extra_args: list[str]) -> list[Value]:
    """extra_args as argv: an item that is a whole reference (`${VLLM_API_KEY}`) expands where the
    process runs, as an env value does (the rules ask for credentials to be written so); every
    other item is passed verbatim."""
    return [parse_env_value(a) for a in extra_args]


def process_env(recipe: Recipe, proc: Process, placement: Placement) -> list[tuple[str, Value]]:
    env: dict[str, Value] = {k: parse_env_value(v) for k, v in recipe.role_env(proc.role).items()}
    env.setdefault("VLLM_NIXL_SIDE_CHANNEL_PORT", str(proc.side_channel_base))
    multi_host = len({p.host for p in placement.processes}) > 1
    if multi_host or not recipe.cluster.is_cpu:
        env.setdefault("VLLM_NIXL_SIDE_CHANNEL_HOST", NodeAddress(proc.node))
    else:
        env.setdefault("VLLM_NIXL_SIDE_CHANNEL_HOST", proc.host)
    if proc.gpus:
        env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(map(str, proc.gpus)))
    if recipe.cluster.is_cpu and proc.cpu_cores is not None:
        # vLLM's CPU backend binds its OpenMP threads to exactly these cores (with the default
        # `auto`, two servers on a small host share a core and every request crawls).
        env.setdefault(OMP_BIND, proc.cpu_cores)
    return sorted(env.items())


def router_argv(recipe: Recipe, placement: Placement) -> list[Value]:
    r = recipe.router
    if r.kind == "vllm-proxy":
        if not r.proxy_command:
            raise RecipectlError(
                "router.kind vllm-proxy needs router.proxy_command",
                fix="router:\n  proxy_command: [python, toy_proxy_server.py]",
            )
        argv: list[Value] = [*r.proxy_command, "--port", str(r.port)]
        for e in placement.role("prefill"):
            argv += ["--prefiller-host", NodeAddress(e.leader.node), "--prefiller-port", str(e.leader.http_port)]
        for e in placement.role("decode"):
            argv += ["--decoder-host", NodeAddress(e.leader.node), "--decoder-port", str(e.leader.http_port)]
        return argv + extra_args_values(r.extra_args)
    argv = [*engine_program(recipe, recipe.engine.router_command), "--vllm-pd-disaggregation"]
    for e in placement.role("prefill"):
        argv += ["--prefill", _url(recipe, e.leader)]
    for e in placement.role("decode"):
        argv += ["--decode", _url(recipe, e.leader)]
    argv += ["--host", bind_address(recipe, placement.router_host), "--port", str(r.port)]
    _flag(argv, "--policy", r.policy)
    _flag(argv, "--prefill-policy", r.prefill_policy)
    _flag(argv, "--decode-policy", r.decode_policy)
    if recipe.kv_transfer.connector.startswith("Nixl"):
        argv += ["--kv-connector", "nixl"]
    _flag(argv, "--prometheus-port", r.prometheus_port)
    _flag(argv, "--request-timeout-secs", r.request_timeout_s)
    _flag(argv, "--worker-startup-timeout-secs", r.worker_startup_timeout_s)
    return argv + extra_args_values(r.extra_args)


def refuse_wide_tensor_parallel(recipe: Recipe) -> None:
    """TP over nodes is a recipe vLLM runs (TOP009) and one recipectl cannot render yet: every
    command that writes or starts a deployment stops here, saying so, before anything is written."""
    wide = wide_tensor_parallel(recipe)
    if not wide:
        return
    nodes = " or ".join(str(n) for n in sorted({w.nodes for w in wide}))
    first = wide[0]
    raise RecipectlError(
        f"recipectl cannot render tensor parallelism over {nodes} nodes yet; "
        + "; ".join(w.describe() for w in wide)
        + " (vLLM runs it, started on each node with --nnodes, --node-rank and --master-addr)",
        fix=f"launch it as its publisher does (vllm serve --nnodes {first.nodes} --node-rank R --master-addr "
        f"LEADER on each node, --headless past the first), or keep each TP group on one node "
        f"({first.role}.parallel tp <= {first.gpus_per_node}) for recipectl to render it (TOP009)",
    )


def refuse_pipeline_parallel(recipe: Recipe) -> None:
    """Pipeline stages on GPUs are a recipe vLLM runs where its launcher gives an endpoint TP x PP
    GPUs a DP rank (TOP008), and one recipectl cannot lay out yet: every command that writes or
    starts a deployment stops here, saying so, before anything is written."""
    staged = pipeline_stages(recipe)
    if staged:
        role = staged[0][0]
        raise RecipectlError(
            "recipectl cannot lay out pipeline parallelism yet; "
            + "; ".join(f"{r} sets {s.value} pipeline stages" for r, s in staged)
            + " (vLLM runs them on TP x PP GPUs a DP rank)",
            fix=f"launch it as its publisher does, or drop --pipeline-parallel-size from {role}.extra_args and "
            f"give {role}.parallel a larger TP or DP for recipectl to render it (TOP008)",
        )


def _url(recipe: Recipe, proc: Process) -> Value:
    """Worker URL as the router sees it. A literal when hosts are known, else built on the node."""
    if recipe.cluster.hosts:
        return f"http://{proc.host}:{proc.http_port}"
    return UrlOf(proc.node, proc.http_port)


def refuse_unrenderable(recipe: Recipe) -> None:
    """What vLLM runs and recipectl cannot render yet (TP over nodes, TOP009; pipeline stages on
    GPUs, TOP008): a RecipectlError saying so."""
    refuse_wide_tensor_parallel(recipe)
    refuse_pipeline_parallel(recipe)


def build_deployment(recipe: Recipe) -> Deployment:
    refuse_unrenderable(recipe)
    placement = place(recipe)
    if placement.problems:
        raise RecipectlError(
            "the recipe does not fit its cluster: " + "; ".join(placement.problems),
            fix="recipectl validate explains it (TOP001)",
        )
    dep = Deployment(recipe, placement)
    for ep in placement.endpoints:
        for proc in ep.processes:
            dep.processes.append(
                ProcessSpec(
                    name=proc.name,
                    kind=proc.role,
                    node=proc.node,
                    host=proc.host,
                    argv=tuple(serve_argv(recipe, proc, placement)),
                    env=tuple(process_env(recipe, proc, placement)),
                    port=None if proc.headless else proc.http_port,
                    gpus=proc.gpus,
                    headless=proc.headless,
                    endpoint=proc.endpoint,
                )
            )
    router_env: list = []  # the router needs none of the engine's environment (and no secrets)
    dep.processes.append(
        ProcessSpec(
            name="router",
            kind="router",
            node=placement.router_node,
            host=placement.router_host,
            argv=tuple(router_argv(recipe, placement)),
            env=tuple(router_env),
            port=recipe.router.port,
        )
    )
    return dep
