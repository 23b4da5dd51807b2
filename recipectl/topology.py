"""Where every process of a recipe runs: endpoints placed on nodes and GPUs, their ports.

Pure arithmetic over the recipe; the rules (fit, port collisions) and every render target
(bash, Slurm, Kubernetes, local launch) read the same placement, so they cannot disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .fieldtypes import core_ranges
from .schema import Recipe, RoleSection


@dataclass(frozen=True)
class Process:
    """One `vllm serve` process: a whole endpoint, or one node's share of a multi-node DP endpoint."""

    role: str
    endpoint: int  # index of the endpoint within its role
    node: int  # index into cluster.host_names
    host: str
    gpus: tuple[int, ...]  # local GPU ids on that node (empty on the CPU platform)
    dp_local: int  # DP ranks this process runs
    dp_start_rank: int
    headless: bool  # a follower of a multi-node DP endpoint (no API server)
    http_port: int
    side_channel_base: int  # VLLM_NIXL_SIDE_CHANNEL_PORT; vLLM adds the DP rank
    cpu_cores: str | None = None

    @property
    def name(self) -> str:
        base = f"{self.role}-{self.endpoint}"
        return f"{base}-node{self.node}" if self.headless or self.dp_start_rank else base

    @property
    def side_channel_ports(self) -> range:
        return range(
            self.side_channel_base + self.dp_start_rank, self.side_channel_base + self.dp_start_rank + self.dp_local
        )


@dataclass(frozen=True)
class Endpoint:
    """One prefill or decode endpoint: its role, its index and the processes that serve it."""

    role: str
    index: int
    processes: tuple[Process, ...]

    @property
    def leader(self) -> Process:
        return self.processes[0]

    @property
    def multi_node(self) -> bool:
        return len({p.node for p in self.processes}) > 1

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def url(self) -> str:
        return f"http://{self.leader.host}:{self.leader.http_port}"


@dataclass
class Placement:
    """Every endpoint of a recipe placed on the cluster's nodes, the router's place, and what did not fit."""

    endpoints: list[Endpoint] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why something did not fit
    router_node: int = 0
    router_host: str = ""
    router_port: int = 30000

    def role(self, role: str) -> list[Endpoint]:
        return [e for e in self.endpoints if e.role == role]

    @property
    def processes(self) -> list[Process]:
        return [p for e in self.endpoints for p in e.processes]

    @property
    def hosts_of(self) -> dict[str, set[str]]:
        return {r: {p.host for e in self.role(r) for p in e.processes} for r in ("prefill", "decode")}

    @property
    def router_url(self) -> str:
        return f"http://{self.router_host}:{self.router_port}"

    @property
    def shared_gpus(self) -> dict[tuple[int, int], list[Process]]:
        """(node, GPU id) -> the processes that share that GPU, for every GPU with more than one."""
        users: dict[tuple[int, int], list[Process]] = {}
        for p in self.processes:
            for g in p.gpus:
                users.setdefault((p.node, g), []).append(p)
        return {k: v for k, v in users.items() if len(v) > 1}

    def sharing(self, proc: Process) -> list[Process]:
        """The other processes on any of this process's GPUs."""
        return [q for p in self.shared_gpus.values() if proc in p for q in p if q is not proc]

    @property
    def roles_on_own_cores(self) -> bool:
        """On the CPU platform: whether no prefill process may run on a core of a decode process.
        False where two of them on one host name a core both use, or where one of them names no
        cores or none that parse (the engine then binds cores of its own choosing: CPU001)."""
        cores: dict[tuple[str, str], set[int]] = {}
        for p in self.processes:
            try:
                mine = parse_cores(p.cpu_cores) if p.cpu_cores is not None else None
            except ValueError:
                mine = None
            if mine is None:
                if any(q.host == p.host and q.role != p.role for q in self.processes):
                    return False
                continue
            cores.setdefault((p.host, p.role), set()).update(mine)
        return all(not cores.get((host, "prefill"), set()) & cores.get((host, "decode"), set()) for host, _ in cores)


@dataclass(frozen=True)
class WideTensorParallel:
    """A role whose tensor-parallel group is wider than a node. vLLM runs one (`--nnodes`,
    `--node-rank`, `--master-addr` on each node, `--headless` past the first: srt-slurm's srtctl
    launches its DeepSeek-V4 decode so); recipectl's placement gives a TP group one node, and its
    renderers write no such command line."""

    role: str
    tp: int
    gpus_per_node: int

    @property
    def nodes(self) -> int:
        """The nodes one tensor-parallel group spans."""
        return -(-self.tp // self.gpus_per_node)

    def describe(self) -> str:
        return f"{self.role} TP {self.tp} spans {self.nodes} nodes of {self.gpus_per_node} GPUs"


def wide_tensor_parallel(recipe: Recipe) -> list[WideTensorParallel]:
    """The roles whose TP is wider than a GPU node (none on the CPU platform, where TP is threads)."""
    cluster = recipe.cluster
    if cluster.is_cpu:
        return []
    return [
        WideTensorParallel(role, spec.parallel.tp, cluster.gpus_per_node)
        for role, spec in recipe.roles.items()
        if spec.parallel.tp > cluster.gpus_per_node
    ]


def place(recipe: Recipe) -> Placement:
    """Place endpoints: multi-node endpoints first on whole nodes, then the rest first-fit.

    Ports: the k-th endpoint of a role on a host gets `port + k` and a side-channel base of
    `side_channel_port + k * dp_size`, so that vLLM's `base + DP rank` ports never overlap.
    """
    cluster = recipe.cluster
    hosts = cluster.host_names
    out = Placement(router_node=min(recipe.router.host_index, len(hosts) - 1), router_port=recipe.router.port)
    out.router_host = hosts[out.router_node]
    free: list[list[int]] = [list(range(cluster.gpus_per_node)) for _ in hosts]
    per_host_count: dict[tuple[str, int], int] = {}

    def ports(role: str, spec: RoleSection, node: int) -> tuple[int, int]:
        k = per_host_count.get((role, node), 0)
        per_host_count[(role, node)] = k + 1
        return spec.port + k, spec.side_channel_port + k * spec.parallel.dp

    placed: dict[tuple[str, int], Endpoint] = {}
    if not cluster.is_cpu:
        # endpoints that name their GPUs first: the rest take whole GPUs none of them named
        claimed: Counter[tuple[str, int, int]] = Counter()  # (role, node, GPU): endpoints holding it
        for role, spec in recipe.roles.items():
            for i, ids in enumerate(spec.devices or ()):
                ep = _place_on_devices(recipe, role, spec, i, tuple(ids), claimed, free, ports, out)
                if ep is not None:
                    placed[(role, i)] = ep
    order = sorted(recipe.roles.items(), key=lambda kv: -kv[1].parallel.gpus)
    for role, spec in order:
        for i in range(spec.endpoints):
            if (role, i) in placed or spec.devices is not None and not cluster.is_cpu:
                continue
            ep = _place_endpoint(recipe, role, spec, i, free, ports, out)
            if ep is not None:
                placed[(role, i)] = ep
    for role in ("prefill", "decode"):
        for i in range(recipe.roles[role].endpoints):
            if (role, i) in placed:
                out.endpoints.append(placed[(role, i)])
    return out


PortsOf = Callable[[str, RoleSection, int], tuple[int, int]]  # (role, spec, node) -> (HTTP, side channel)


def _place_on_devices(
    recipe: Recipe,
    role: str,
    spec: RoleSection,
    i: int,
    ids: tuple[int, ...],
    claimed: Counter[tuple[str, int, int]],
    free: list[list[int]],
    ports: PortsOf,
    out: Placement,
) -> Endpoint | None:
    """An endpoint that names its GPUs (`devices`): on the first node where its role has not yet
    taken them. Endpoints of other roles may name the same GPUs: they share them, each with its
    own gpu_memory_utilization (TOP001 counts that memory, launch starts them one after another);
    so may endpoints of the same role, once every node has them taken."""
    gpn = recipe.cluster.gpus_per_node
    bad = [g for g in ids if g >= gpn]
    if bad:
        out.problems.append(
            f"{role} endpoint {i}: devices {list(ids)} name GPU {bad[0]}, and a node has GPUs 0-{gpn - 1}"
        )
        return None
    hosts = recipe.cluster.host_names
    # The first node where the role has not taken these GPUs; where it has on every node, the
    # node where the fewest of its endpoints hold them: two servers of one role share a GPU as
    # two of different roles do (each its own gpu_memory_utilization; TOP001 counts the memory).
    node = min(range(len(hosts)), key=lambda n: (max(claimed[(role, n, g)] for g in ids), n))
    for g in ids:
        claimed[(role, node, g)] += 1
        if g in free[node]:
            free[node].remove(g)
    http, side = ports(role, spec, node)
    cores = spec.cpu_cores[i] if spec.cpu_cores else None
    return Endpoint(role, i, (Process(role, i, node, hosts[node], ids, spec.parallel.dp, 0, False, http, side, cores),))


def _place_endpoint(
    recipe: Recipe, role: str, spec: RoleSection, i: int, free: list[list[int]], ports: PortsOf, out: Placement
) -> Endpoint | None:
    cluster = recipe.cluster
    hosts = cluster.host_names
    par = spec.parallel
    cores = spec.cpu_cores[i] if spec.cpu_cores else None
    if cluster.is_cpu:
        # CPU platform: one process per endpoint, all DP ranks local; nodes are used round-robin
        # over the endpoints of both roles, prefill's first: on two nodes one prefill and one
        # decode land on different nodes, and NIXL crosses hosts.
        k = i if role == "prefill" else recipe.roles["prefill"].endpoints + i
        node = k % len(hosts)
        http, side = ports(role, spec, node)
        proc = Process(role, i, node, hosts[node], (), par.dp, 0, False, http, side, cores)
        return Endpoint(role, i, (proc,))
    gpn = cluster.gpus_per_node
    need = par.gpus
    if par.tp > gpn:  # not placed: wide_tensor_parallel names it (TOP009), render refuses it
        return None
    if need <= gpn:
        for node, gpus in enumerate(free):
            if len(gpus) >= need:
                take = tuple(gpus[:need])
                del gpus[:need]
                http, side = ports(role, spec, node)
                proc = Process(role, i, node, hosts[node], take, par.dp, 0, False, http, side, cores)
                return Endpoint(role, i, (proc,))
        out.problems.append(f"{role} endpoint {i} ({par.label}, {need} GPUs) does not fit on the free GPUs")
        return None
    # multi-node data parallel: whole nodes, gpus_per_node // tp DP ranks per node
    ranks_per_node = gpn // par.tp
    if par.dp % ranks_per_node:
        out.problems.append(f"{role} endpoint {i}: DP {par.dp} does not split into {ranks_per_node} ranks per node")
        return None
    n_nodes = par.dp // ranks_per_node
    empty = [n for n, g in enumerate(free) if len(g) == gpn]
    if len(empty) < n_nodes:
        out.problems.append(f"{role} endpoint {i} ({par.label}) needs {n_nodes} whole nodes; {len(empty)} free")
        return None
    procs: list[Process] = []
    for j, node in enumerate(empty[:n_nodes]):
        take = tuple(free[node][: ranks_per_node * par.tp])
        del free[node][: ranks_per_node * par.tp]
        http, side = ports(role, spec, node) if j == 0 else (spec.port, spec.side_channel_port)
        procs.append(
            Process(
                role,
                i,
                node,
                hosts[node],
                take,
                ranks_per_node,
                j * ranks_per_node,
                j > 0,
                http,
                side if j == 0 else procs[0].side_channel_base,
                cores,
            )
        )
    return Endpoint(role, i, tuple(procs))


def parse_cores(spec: str) -> set[int]:
    """'0-3,6' -> {0, 1, 2, 3, 6}; raises ValueError on anything else (fieldtypes.core_ranges)."""
    return {c for lo, hi in core_ranges(spec) for c in range(lo, hi + 1)}
