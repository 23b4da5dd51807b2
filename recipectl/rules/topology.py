"""Topology: endpoints fit the cluster, experts split evenly, ports do not collide."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from ..diagnostics import Category, Severity
from ..effective import pipeline_stages
from ..plan.shares import SHARE_MAX, even_shares, shared_gpus
from ..schema import Quantization
from ..topology import wide_tensor_parallel
from .context import RuleContext
from .registry import Violation, rule


@rule(
    code="TOP001",
    name="topology.fit",
    title="Endpoints fit the cluster's nodes and GPUs",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="GPU clusters",
    source="vLLM data-parallel placement (multi-node DP on whole nodes); vLLM worker start-up "
    '("Free memory on device ... is less than desired GPU memory utilization")',
)
def fit(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That every endpoint (TP x DP GPUs) can be placed: multi-node DP endpoints on whole nodes, all
    endpoints together within `nodes x gpus_per_node`. Endpoints that name the same GPU in
    `devices` share it, and are counted by memory: their roles' `gpu_memory_utilization` on that
    GPU must add up to at most 1. A TP group wider than a node is not counted here: vLLM runs it
    over nodes, and TOP009 says that recipectl does not render it.

    Why:
    An endpoint that does not fit waits forever for GPUs (Slurm/Kubernetes) or fails with an
    out-of-range device (bash): a lost allocation either way. On a shared GPU, vLLM refuses a
    server whose share is more than the memory the others left ("Free memory on device ... is
    less than desired GPU memory utilization"); with the default utilization (0.92) two servers
    never fit.

    Example:
        cluster: {gpu: H200, gpus_per_node: 1, nodes: 1}
        prefill: {devices: [[0]]}
        decode: {devices: [[0]]}

    Fix:
        prefill:
          devices: [[0]]
          gpu_memory_utilization: 0.45
        decode:
          devices: [[0]]
          gpu_memory_utilization: 0.45
    """
    if ctx.is_cpu:
        return
    for shared in shared_gpus(ctx.recipe, ctx.placement):
        if shared.total > SHARE_MAX + 1e-9:
            share = even_shares(len(shared.users))
            roles = list(dict.fromkeys(p.role for p, _ in shared.users))
            yield Violation(
                f"{roles[-1]}.gpu_memory_utilization",
                f"GPU {shared.gpu} of {shared.users[0][0].host} is shared by {shared.names}: "
                f"{shared.total:.2f} of its memory asked, more than it has",
                "".join(f"{r}:\n  gpu_memory_utilization: {share}\n" for r in roles).rstrip(),
            )
    wide = wide_tensor_parallel(ctx.recipe)  # left unplaced by place(): TOP009's
    if not ctx.placement.problems and not wide:
        return
    c = ctx.recipe.cluster
    total = c.nodes * c.gpus_per_node
    need = sum(s.endpoints * s.parallel.gpus for _, s in ctx.roles() if s.devices is None)
    need += len({g for _, s in ctx.roles() for ids in (s.devices or ()) for g in ids})  # shared: once
    named = [p for p in ctx.placement.problems if ": devices " in p]
    for role, spec in ctx.roles():
        if any(p.startswith(f"{role} ") for p in named):
            top = max(g for ids in spec.devices or () for g in ids)
            yield Violation(
                f"{role}.devices",
                next(p for p in named if p.startswith(f"{role} ")),
                f"cluster:\n  gpus_per_node: {max(top + 1, c.gpus_per_node)}"
                if top >= c.gpus_per_node
                else f"{role}:\n  endpoints: 1",
            )
    rest = [p for p in ctx.placement.problems if p not in named]
    nodes_needed = -(-need // max(1, c.gpus_per_node))
    if rest:
        sharing = (
            (
                "; servers can share a GPU instead: the same devices for both roles and a "
                "gpu_memory_utilization each (TOP001's docs)"
            )
            if c.nodes == 1 and all(s.parallel.gpus <= c.gpus_per_node for _, s in ctx.roles())
            else ""
        )
        yield Violation(
            "cluster.nodes",
            f"{len(rest)} endpoint(s) do not fit: {rest[0]} ({need} GPUs wanted, {total} in the cluster){sharing}",
            f"cluster:\n  nodes: {max(nodes_needed, c.nodes + 1)}",
        )
    elif wide and need > total:  # still GPUs the cluster must have
        yield Violation(
            "cluster.nodes",
            f"the endpoints want {need} GPUs, {total} in the cluster",
            f"cluster:\n  nodes: {nodes_needed}",
        )


@rule(
    code="TOP002",
    name="topology.expert-split",
    title="Expert count divisible by the EP size",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="MoE models with expert parallel",
    source="vLLM FusedMoE expert-parallel sharding",
)
def expert_split(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the model's routed experts divide evenly over each endpoint's expert-parallel size
    (TP x DP when `expert_parallel` is on).

    Why:
    Expert-parallel sharding gives each rank `num_experts / ep_size` experts; an uneven split is
    refused at model load, after the weights were read.

    Example:
        model: {num_experts: 512}
        decode: {parallel: DEP6}

    Fix:
        decode:
          parallel: DEP8
    """
    n = ctx.recipe.model.num_experts
    if not n:
        return
    for role, spec in ctx.roles():
        ep = spec.parallel.ep_size
        if spec.parallel.expert_parallel and n % ep:
            good = [k for k in (2, 4, 8, 16, 32, 64) if n % k == 0 and k <= max(ep * 2, 8)]
            yield Violation(
                f"{role}.parallel",
                f"{n} experts do not split over EP size {ep}",
                f"{role}:\n  parallel: DEP{good[-1] if good else 1}",
            )


@rule(
    code="TOP003",
    name="topology.nvfp4-blackwell",
    title="NVFP4 at full speed on Blackwell only",
    severity=Severity.WARNING,
    category=Category.PERFORMANCE,
    applies="quantization nvfp4 on GPUs other than Blackwell",
    source="vLLM quantization/modelopt.py ModelOptNvFp4Config.get_min_capability (75) and "
    "utils/marlin_utils_fp4.is_fp4_marlin_supported, read in the 0.17.1, 0.32.0 and 0.33.0 wheels",
)
def nvfp4(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether an NVFP4 checkpoint runs on GPUs without FP4 tensor cores (H100, H200).

    Why:
    vLLM loads ModelOpt NVFP4 from compute capability 7.5 up: below Blackwell its weights run
    through Marlin's FP4 kernels, dequantized to 16 bits in the GEMM (W4A16). The model serves
    (Dynamo publishes an NVFP4 recipe on H200), but its GEMMs do not use FP4 tensor cores and its
    activations stay 16-bit: what NVFP4 buys on Blackwell, it does not buy here (its memory
    saving stays). On the CPU platform Marlin is not there (0.33 asks `is_cuda()` too).

    Example:
        model: {quantization: nvfp4}
        cluster: {gpu: H200}

    Fix:
        model:
          path: Qwen/Qwen3.5-397B-A17B-FP8
          quantization: fp8
    """
    if ctx.recipe.model.quantization is Quantization.NVFP4 and ctx.gpu_family != "blackwell":
        gpu = ctx.recipe.cluster.gpu.value
        how = (
            "has no Marlin FP4 kernels: check that this engine build loads the checkpoint"
            if ctx.is_cpu
            else "runs through Marlin's weight-only FP4 kernels (W4A16), not FP4 tensor cores"
        )
        yield Violation(
            "model.quantization",
            f"NVFP4 on {gpu} {how}",
            "model:\n  quantization: fp8   # and an FP8 checkpoint, or Blackwell GPUs (GB200, B200)",
        )


@rule(
    code="TOP004",
    name="topology.multinode-dp-rpc",
    title="Multi-node DP endpoint on the default RPC port",
    severity=Severity.INFO,
    category=Category.OPERABILITY,
    applies="endpoints whose data-parallel ranks span nodes",
    source="vLLM data-parallel deployment docs (--data-parallel-address/--data-parallel-rpc-port; "
    "the port defaults to 29550)",
)
def multinode_rpc(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether a data-parallel endpoint spread over several nodes leaves `data_parallel_rpc_port`
    to vLLM's default (29550).

    Why:
    Headless followers find their leader at `--data-parallel-address:--data-parallel-rpc-port`.
    vLLM's default port works (published recipes leave it out), but a port recipectl knows is one
    it can check against every other port on the leader's host (TOP005) and show in the rendered
    scripts.

    Example:
        decode: {parallel: DEP8}   # over two 4-GPU nodes

    Fix:
        decode:
          data_parallel_rpc_port: 13345
    """
    for ep in ctx.placement.endpoints:
        spec = ctx.recipe.roles[ep.role]
        if ep.multi_node and spec.data_parallel_rpc_port is None:
            yield Violation(
                f"{ep.role}.data_parallel_rpc_port",
                f"{ep.name} spans nodes {sorted({p.node for p in ep.processes})} on vLLM's default DP RPC port (29550)",
                f"{ep.role}:\n  data_parallel_rpc_port: 13345",
            )


@rule(
    code="TOP005",
    name="topology.port-collision",
    title="Ports collide on a host",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="every host",
    source="vLLM NIXL side channel (base port + DP rank); router and API ports",
)
def port_collision(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That on every host the HTTP ports, the NIXL side-channel ports (base + DP rank, spaced by
    the DP size per endpoint), the DP RPC ports and the router's ports are all distinct.

    Why:
    Two listeners on one port: the second process dies at start-up ("address already in use"),
    or worse, a NIXL handshake reaches the wrong engine.

    Example:
        prefill: {port: 8100, side_channel_port: 5600, parallel: DP2}
        decode: {port: 8200, side_channel_port: 5601}

    Fix:
        decode:
          side_channel_port: 5700
    """
    used = _listeners(ctx)
    reported = 0
    for host, ranges in used.items():
        for port, who, more in _collisions([(first, end, who) for first, end, who, _ in ranges]):
            if reported == _MAX_PORT_FINDINGS:
                return
            reported += 1
            named = ", ".join(who) + (f" and {more} more" if more else "")
            role = "decode" if any(w.startswith("decode") for w in who) else "prefill"
            field = "side_channel_port" if any("NIXL" in w for w in who) else "port"
            if "router" in who:
                yield Violation("router.port", f"port {port} on {host} is used by {named}", "router:\n  port: 30000")
                continue
            yield Violation(
                f"{role}.{field}",
                f"port {port} on {host} is used by {named}",
                f"{role}:\n  {field}: <a base with room for every DP rank, e.g. "
                f"{5700 if field == 'side_channel_port' else 8200}>",
            )


_MAX_PORT_FINDINGS = 20  # past these, more of the same tells nothing new
_MAX_NAMED = 4  # owners named per port


def _collisions(ranges: list[tuple[int, int, str]]) -> Iterator[tuple[int, list[str], int]]:
    """(first port, owners named, owners not named) for every run of ports that several ranges
    share, in port order: a sweep over the ranges' ends, O(n log n) in the number of ranges."""
    events = sorted(
        [(a, 1, i) for i, (a, _, _) in enumerate(ranges)] + [(b, 0, i) for i, (_, b, _) in enumerate(ranges)]
    )
    active: dict[int, None] = {}  # range index -> None, in the order the ranges were listed
    k = 0
    while k < len(events):
        port = events[k][0]
        while k < len(events) and events[k][0] == port:  # closes before opens (0 < 1) at one port
            _, opening, i = events[k]
            if opening:
                active[i] = None
            else:
                active.pop(i, None)
            k += 1
        if len(active) > 1:
            owners = sorted(active)
            yield port, [ranges[i][2] for i in owners[:_MAX_NAMED]], max(0, len(owners) - _MAX_NAMED)


@rule(
    code="TOP006",
    name="topology.side-channel-host",
    title="NIXL side-channel host set when roles span hosts",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="P/D over NIXL with endpoints on more than one host",
    source="vLLM envs.py (VLLM_NIXL_SIDE_CHANNEL_HOST defaults to localhost: engine fact "
    "nixl-side-channel-host-localhost)",
)
def side_channel_host(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That `VLLM_NIXL_SIDE_CHANNEL_HOST` is provided when prefill and decode run on different hosts
    — in the recipe's env, or by the renderer (bash/Slurm set it to the node's address,
    Kubernetes to the pod IP). An explicit `localhost`/`127.0.0.1` across hosts is an error.

    Why:
    The default is localhost: decode would look for prefill's NIXL metadata on its own host and
    the handshake times out; every request then fails or is recomputed.

    Example:
        cluster: {gpu: H200, nodes: 2, gpus_per_node: 1}
        prefill: {env: {VLLM_NIXL_SIDE_CHANNEL_HOST: localhost}}

    Fix:
        prefill:
          env: {}   # recipectl renders the node's own address
    """
    hosts = ctx.placement.hosts_of
    if not ctx.uses_nixl or len(hosts["prefill"] | hosts["decode"]) < 2:
        return
    for role, _ in ctx.roles():
        value = ctx.env(role).get("VLLM_NIXL_SIDE_CHANNEL_HOST")
        if value in ("localhost", "127.0.0.1", "::1"):
            yield Violation(
                ctx.env_path(role, "VLLM_NIXL_SIDE_CHANNEL_HOST"),
                f"{role} advertises its NIXL side channel on {value} but peers are on other hosts",
                f"{role}:\n  env: {{}}   # remove VLLM_NIXL_SIDE_CHANNEL_HOST; it is rendered per node",
            )


# Linux's default net.ipv4.ip_local_port_range, as (first, past-the-end): the ports the kernel hands
# to every bind of port 0 and every outgoing connection on a node.
EPHEMERAL = (32768, 61000)


def _listeners(ctx: RuleContext) -> dict[str, list[tuple[int, int, str, str]]]:
    """The ports every host listens on, as (first, past-the-end, who, the recipe field that sets
    them): a range is one interval, never a list of its ports (1,024 endpoints of DP 4,096 on one
    host are four million ports)."""
    used: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)
    for p in ctx.placement.processes:
        if not p.headless:
            used[p.host].append((p.http_port, p.http_port + 1, f"{p.name} http", f"{p.role}.port"))
        sc = p.side_channel_ports
        if len(sc):
            used[p.host].append((sc.start, sc.stop, f"{p.name} NIXL side channel", f"{p.role}.side_channel_port"))
        rpc = ctx.recipe.roles[p.role].data_parallel_rpc_port
        if rpc and not p.headless:
            used[p.host].append((rpc, rpc + 1, f"{p.name} DP RPC", f"{p.role}.data_parallel_rpc_port"))
    r = ctx.recipe.router
    used[ctx.placement.router_host].append((r.port, r.port + 1, "router", "router.port"))
    if r.prometheus_port:
        used[ctx.placement.router_host].append(
            (r.prometheus_port, r.prometheus_port + 1, "router metrics", "router.prometheus_port")
        )
    return used


@rule(
    code="TOP007",
    name="topology.ephemeral-port",
    title="Fixed ports below the ephemeral range",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="every host",
    source="Linux net.ipv4.ip_local_port_range (32768-60999 by default); a prefill whose NIXL side-channel "
    "port an engine process had taken at random never became ready (docs/engine-cpu.md, Pitfalls)",
)
def ephemeral_port(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no port the recipe fixes (HTTP, the NIXL side channel with its DP ranks, DP RPC, the
    router and its metrics) lies in Linux's default ephemeral range, 32768-60999.

    Why:
    The kernel hands out ports from that range to every process that binds port 0 or opens a
    connection, and vLLM's own processes bind several that way while they start. A server that
    binds a fixed port in the range later can find it taken. For the NIXL side channel that is
    a hang, not an exit: its listener thread dies, and the server lives on without ever answering
    /health (launch names the port when it sees that line).

    Example:
        decode: {side_channel_port: 43745}

    Fix:
        decode:
          side_channel_port: 5700
    """
    seen: set[str] = set()
    for host, ranges in _listeners(ctx).items():
        for first, end, who, path in ranges:
            if first < EPHEMERAL[1] and end > EPHEMERAL[0] and path not in seen:
                seen.add(path)
                role, field = path.split(".")
                section = ctx.recipe.router if role == "router" else ctx.recipe.roles[role]
                better = type(section).model_fields[field].default or _PORTS_WITHOUT_DEFAULT[field]
                yield Violation(
                    path,
                    f"{who} listens on port {max(first, EPHEMERAL[0])} on {host}, inside Linux's "
                    "default ephemeral range (32768-60999), where the engine's own random ports "
                    "can take it first",
                    f"{role}:\n  {field}: {better}",
                )


@rule(
    code="TOP008",
    name="topology.pipeline-parallel",
    title="Pipeline parallelism, which recipectl does not lay out yet",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="GPU roles whose extra_args set --pipeline-parallel-size above 1",
    source='vLLM config/parallel.py ParallelConfig (world size = TP x PP: "World size (...) is larger than '
    "the number of available GPUs\", every release); recipectl's placement gives an endpoint TP x DP GPUs",
)
def pipeline_parallel(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether a GPU role's `extra_args` set `--pipeline-parallel-size` (`-pp`) above 1.

    Why:
    vLLM runs pipeline stages on TP x PP GPUs a DP rank, where its launcher gives it them. recipectl
    places an endpoint on TP x DP GPUs (its CUDA_VISIBLE_DEVICES) and has no pipeline-parallel
    layout to place stages by: started so, vLLM finds fewer GPUs than its world size and stops
    ("World size (2) is larger than the number of available GPUs (1) in this node"). So `render`
    and `launch` refuse it (exit 2). The finding is about recipectl, not the recipe: launch it as
    its publisher does.

    Example:
        decode:
          parallel: TP2
          extra_args: [-pp, "2"]

    Fix:
        decode:
          parallel: TP4   # and -pp dropped from extra_args, for recipectl to render it
    """
    for role, setting in pipeline_stages(ctx.recipe, ctx.effective):
        stages = setting.value
        tp = ctx.setting(role, "tp").value or 1
        yield Violation(
            setting.path,
            f"{role} sets {stages} pipeline stages: vLLM wants TP {tp} x PP {stages} = {tp * stages} GPUs a "
            f"DP rank, and recipectl, which lays out no pipeline parallelism yet, would give it {tp}: render "
            "and launch refuse it",
            f"# drop --pipeline-parallel-size from {role}.extra_args; for more GPUs an endpoint, "
            f"a larger TP or DP in {role}.parallel",
        )


@rule(
    code="TOP009",
    name="topology.tp-over-nodes",
    title="Tensor parallelism over nodes, which recipectl does not render yet",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="GPU roles whose TP is wider than a node",
    source="vLLM engine/arg_utils.py EngineArgs master_addr/nnodes/node_rank (--master-addr, --nnodes, "
    "--node-rank; --headless past the first node), read in the 0.26.0, 0.31.0 and 0.32.0 wheels; srt-slurm "
    "src/srtctl/backends/vllm.py passes them to a TP endpoint over nodes (its DeepSeek-V4-Pro GB200 1p4d "
    "and 1p8d recipes: decode TP8 over two 4-GPU nodes)",
)
def tp_over_nodes(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Whether a role's tensor parallelism (`parallel.tp`) is wider than a node's GPUs
    (`cluster.gpus_per_node`).

    Why:
    vLLM runs a TP group over nodes: the same `vllm serve` on each node with `--nnodes`,
    `--node-rank` and `--master-addr` (the nodes after the first `--headless`), and srt-slurm
    publishes DeepSeek-V4-Pro recipes whose decode is TP8 over two 4-GPU GB200 nodes. The recipe
    is one the engine runs; recipectl's placement gives a TP group one node, and its renderers
    write no such command line, so `render` and `launch` refuse it (exit 2). The finding is about
    recipectl, not the recipe: launch it as its publisher does.

    Example:
        cluster: {gpu: GB200, gpus_per_node: 4, nodes: 4}
        decode: {parallel: TP8}

    Fix:
        decode:
          parallel: TP4   # for recipectl to render it: a TP group within a node
    """
    for wide in wide_tensor_parallel(ctx.recipe):
        yield Violation(
            f"{wide.role}.parallel",
            f"{wide.describe()}: vLLM runs it (each node started with --nnodes {wide.nodes}, --node-rank and "
            "--master-addr), but recipectl cannot render or launch tensor parallelism over nodes yet",
            f"# launch it as its publisher does; for recipectl to render it, a TP group within a node:\n"
            f"{wide.role}:\n  parallel: {{tp: {wide.gpus_per_node}, dp: {wide.nodes}}}   # or more endpoints",
        )


# A fix's value for the port fields the schema leaves unset: vllm-router's metrics default, and the
# DP RPC port TOP004 suggests.
_PORTS_WITHOUT_DEFAULT = {"prometheus_port": 29000, "data_parallel_rpc_port": 13345}
