"""Write a Deployment as bash scripts (one per host), an sbatch script, or Kubernetes manifests.

One Jinja2 environment (StrictUndefined: a missing value is an error, never an empty string);
Python decides every flag and quotes every word; templates only lay the files out.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .processes import Deployment, ProcessSpec
from .values import EnvRef, HomePath, NodeAddress, UrlOf, shell_lines, shell_word

TARGETS = ("bash", "slurm", "k8s")
# templates/ at the top of the source tree, shipped inside the package as recipectl/templates
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@lru_cache(maxsize=1)
def environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        autoescape=False)


@dataclass(frozen=True)
class RenderedFile:
    """One file a render target writes: its name, its text and whether it is executable."""
    name: str
    text: str
    executable: bool = False


def _env_lines(proc: ProcessSpec, node_expr) -> list[str]:
    return [f"{k}={shell_word(v, node_expr)}" for k, v in proc.env]


def _header(dep: Deployment) -> dict:
    r = dep.recipe
    return {"name": r.name, "model": r.model.path, "version": r.engine.vllm_version or "unknown",
            "image": r.engine.image}


def render_bash(dep: Deployment) -> list[RenderedFile]:
    hosts = dep.recipe.cluster.host_names

    def node_expr(n: int) -> str:
        return hosts[n]

    files_out = []
    for node in dep.nodes_used:
        procs = dep.on_node(node)
        workers = [p for p in procs if p.kind != "router"]
        router = next((p for p in procs if p.kind == "router"), None)
        ctx = {
            **_header(dep), "host": hosts[node], "node": node, "required_env": required_env(dep),
            "workers": [{"name": p.name, "env": _env_lines(p, node_expr), "cmd": shell_lines(p.argv, node_expr)}
                        for p in workers],
            "router": None if router is None else {
                "name": router.name, "env": _env_lines(router, node_expr), "cmd": shell_lines(router.argv, node_expr),
                "wait_urls": [shlex.quote(f"http://{hosts[p.node]}:{p.port}/health") for p in dep.workers if p.port]},
        }
        text = environment().get_template("bash.sh.j2").render(**ctx)
        files_out.append(RenderedFile(f"{dep.recipe.name}.{hosts[node]}.sh", text, executable=True))
    return files_out


def render_slurm(dep: Deployment) -> list[RenderedFile]:
    nodes = dep.nodes_used
    index = {n: i for i, n in enumerate(nodes)}  # recipe node -> position in the job's node list

    r = dep.recipe

    def node_expr(n: int) -> str:
        # hosts the recipe names are used as they are; otherwise the job's own node list
        return r.cluster.hosts[n] if r.cluster.hosts else f"${{NODES[{index[n]}]}}"

    cpus_per_gpu = (r.cluster.cpus_per_node // r.cluster.gpus_per_node
                    if r.cluster.cpus_per_node and r.cluster.gpus_per_node else 8)
    steps = []
    for p in dep.workers:
        # Slurm gives each step its GPUs (--gpus) and sets CUDA_VISIBLE_DEVICES itself
        env = [ln for ln in _env_lines(p, node_expr) if not ln.startswith("CUDA_VISIBLE_DEVICES=")]
        steps.append({"name": p.name, "node": index[p.node], "gpus": len(p.gpus), "cpus": cpus_per_gpu * len(p.gpus),
                      "env": env, "cmd": shell_lines(p.argv, node_expr)})
    router = dep.router
    ctx = {
        **_header(dep), "nodes": len(nodes), "gpus_per_node": 0 if r.cluster.is_cpu else r.cluster.gpus_per_node,
        "required_env": required_env(dep),
        "steps": steps,
        "router": {"name": router.name, "node": index[router.node], "env": _env_lines(router, node_expr),
                   "cmd": shell_lines(router.argv, node_expr), "port": router.port,
                   "address": node_expr(router.node)},
        "wait_urls": [f'"http://{node_expr(p.node)}:{p.port}/health"' for p in dep.workers if p.port],
        "ready_timeout": int(r.launch.ready_timeout_s),
        "container": r.engine.image,
    }
    text = environment().get_template("slurm.sbatch.j2").render(**ctx)
    return [RenderedFile(f"{r.name}.sbatch", text, executable=True)]


def _k8s_name(text: str, limit: int = 40) -> str:
    """A DNS-1123 name; a long one is cut and given a hash of the whole, so variants stay distinct."""
    import hashlib

    name = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    if len(name) <= limit:
        return name
    return name[: limit - 7].strip("-") + "-" + hashlib.sha1(name.encode()).hexdigest()[:6]


def _k8s_literal(text: str) -> str:
    """Kubernetes expands $(NAME) in command, args and env values; $$ is a literal $."""
    return text.replace("$", "$$")


def required_env(dep: Deployment) -> list[str]:
    """Variables the rendered processes take by reference (${NAME}): checked before anything starts."""
    names = {v.name for p in dep.processes for _, v in p.env if isinstance(v, EnvRef)}
    names |= {a.name for p in dep.processes for a in p.argv if isinstance(a, EnvRef)}
    return sorted(names)


def render_k8s(dep: Deployment) -> list[RenderedFile]:
    r = dep.recipe
    base = _k8s_name(r.name)
    image = r.engine.image or "vllm/vllm-openai:latest"

    def svc(p_node_role_endpoint: tuple[str, int]) -> str:
        role, ep = p_node_role_endpoint
        return f"{base}-{role}-{ep}"

    def k8s_env(proc: ProcessSpec, leader: bool) -> list[dict]:
        out = []
        for k, v in proc.env:
            if isinstance(v, NodeAddress):
                out.append({"name": k, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
            elif isinstance(v, EnvRef):
                out.append({"name": k, "valueFrom": {"secretKeyRef": {"name": _k8s_name(v.name), "key": "value"}}})
            elif k == "CUDA_VISIBLE_DEVICES":
                continue  # each pod gets its own GPUs from the device plugin
            else:
                out.append({"name": k, "value": _k8s_literal(str(v))})
        return out

    def k8s_words(proc: ProcessSpec, worker_rank_expr: str | None = None) -> list[tuple[str, bool]]:
        """(word, is_expression): expressions are expanded by the kubelet or the shell; every
        literal is escaped so that neither can touch it."""
        words: list[tuple[str, bool]] = []
        argv = list(proc.argv)
        i = 0
        while i < len(argv):
            a = argv[i]
            if isinstance(a, NodeAddress):
                words.append(("$(LWS_LEADER_ADDRESS)", True))
            elif isinstance(a, UrlOf):
                owner = next(p for p in dep.workers if p.node == a.node and p.port == a.port)
                words.append((f"http://{svc((owner.kind, owner.endpoint))}:{a.port}", False))
            elif isinstance(a, EnvRef):
                words.append((f"$({a.name})", True))
            elif isinstance(a, HomePath):
                # containers run as root unless the image says otherwise
                words.append((_k8s_literal(f"/root/{a.rest}"), False))
            elif a == "--data-parallel-start-rank" and worker_rank_expr:
                words += [(a, False), (worker_rank_expr, True)]
                i += 1
            else:
                words.append((_k8s_literal(str(a)), False))
            i += 1
        return words

    def k8s_args(proc: ProcessSpec) -> list[str]:
        return [w for w, _ in k8s_words(proc)]

    workloads = []
    for ep in dep.placement.endpoints:
        procs = [p for p in dep.workers if p.kind == ep.role and p.endpoint == ep.index]
        leader = procs[0]
        gpus = len(leader.gpus)
        entry = {"name": svc((ep.role, ep.index)), "role": ep.role, "port": leader.port, "gpus": gpus,
                 "cpu": r.cluster.is_cpu, "env": k8s_env(leader, True)}
        if ep.multi_node:
            follower = procs[1]
            dp_local = ep.processes[0].dp_local
            entry.update(kind="lws", size=len(procs), leader_args=k8s_args(leader),
                         # every follower pod shares one template: its start rank comes from its index
                         worker_command=["sh", "-c", "exec " + " ".join(
                             w if is_expr else shlex.quote(w)
                             for w, is_expr in k8s_words(follower, f"$((LWS_WORKER_INDEX * {dp_local}))"))],
                         worker_env=k8s_env(follower, False))
        else:
            entry.update(kind="deployment", args=k8s_args(leader))
        workloads.append(entry)
    router = dep.router
    ctx = {**_header(dep), "base": base, "image": image, "workloads": workloads,
           "router": {"name": f"{base}-router", "port": router.port, "args": k8s_args(router),
                      "env": k8s_env(router, True)}}
    env = environment()
    env.filters.setdefault("json", lambda v: json.dumps(v))
    text = env.get_template("k8s.yaml.j2").render(**ctx)
    return [RenderedFile(f"{r.name}.k8s.yaml", text)]


RENDERERS = {"bash": render_bash, "slurm": render_slurm, "k8s": render_k8s}


def render(dep: Deployment, target: str) -> list[RenderedFile]:
    return RENDERERS[target](dep)


def write(files_out: list[RenderedFile], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for f in files_out:
        p = out_dir / f.name
        p.write_text(f.text)
        if f.executable:
            p.chmod(0o755)
        written.append(p)
    return written
