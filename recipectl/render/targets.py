"""Write a Deployment as bash scripts (one per host), an sbatch script, or Kubernetes manifests.

Scripts: one Jinja2 environment (StrictUndefined: a missing value is an error, never an empty
string) whose finalize shell-quotes every value a template writes (shlex.quote), unless it is shell
code that values.py built from quoted parts; Python decides every flag, templates only lay the
files out and quote nothing themselves. Manifests: Python data, written by a YAML emitter.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from ..errors import ExitCode, RecipectlError
from ..fieldtypes import core_list_text
from ..fileio import UnwritableFile, same_file_as, write_all_atomic
from ..secretscan import pure_reference, secret_flag, secret_name, secret_value
from .processes import Deployment, ProcessSpec, bound_cores
from .registry import TARGETS
from .values import EnvRef, HomePath, NodeAddress, Shell, Token, UrlOf, Var, concat, quote, shell_lines, shell_word

# templates/ at the top of the source tree, shipped inside the package as recipectl/templates
TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


def shell_finalize(value) -> str:
    """What a template's `{{ value }}` writes: shell code made by values.py as it is, a number as
    digits, anything else as one shell-quoted word."""
    if isinstance(value, Shell):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"a template wrote a {type(value).__name__} ({value!r}); only strings and numbers are words")


@lru_cache(maxsize=1)
def environment():
    import jinja2  # only the script targets need it: k8s and every other command start without it

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        finalize=shell_finalize,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


@dataclass(frozen=True)
class RenderedFile:
    """One file a render target writes: its name, its text and whether it is executable."""

    name: str
    text: str
    executable: bool = False


_SECRET_FIX = (
    "set it where the process runs and reference it: HF_TOKEN: ${HF_TOKEN}, --api-key ${VLLM_API_KEY} "
    "(an ignore: of OPS001, OPS004 or OPS005 silences validate; it never lets a credential "
    "into a rendered file)"
)


def _literal_secret(dep: Deployment) -> str | None:
    """Where a process of `dep` would get a literal credential: a credential-named variable with a
    literal value, a credential flag with a literal argument, a credential-shaped literal anywhere.
    Said without the value."""
    for p in dep.processes:
        for k, v in p.env:
            if isinstance(v, str) and v and (secret_name(k) and not pure_reference(v) or secret_value(v)):
                return f"{p.name}'s environment variable {k} holds a literal credential"
        argv = list(p.argv)
        for i, a in enumerate(argv):
            if not isinstance(a, str):
                continue
            flag = secret_flag(a)
            if flag and "=" in a and not pure_reference(a.split("=", 1)[1]):
                return f"{p.name}'s argument {flag} holds a literal credential"
            following = argv[i + 1] if i + 1 < len(argv) else None
            if flag and "=" not in a and isinstance(following, str) and not pure_reference(following):
                return f"{p.name}'s argument {flag} is given a literal credential"
            if secret_value(a):
                return f"{p.name}'s argument {i} holds a literal credential"
    return None


def _refuse_secrets(dep: Deployment, files_out: list[RenderedFile]) -> list[RenderedFile]:
    """Every renderer's last step: no file it made holds a credential, whatever the recipe's
    `ignore:` says (the rules' ignores decide what validate reports, not what is written)."""
    where = _literal_secret(dep) or next(
        (f"{f.name} would hold a credential-shaped value" for f in files_out if secret_value(f.text)), None
    )
    if where:
        raise RecipectlError(
            f"refusing to render: {where}; nothing was written", fix=_SECRET_FIX, exit_code=ExitCode.FINDINGS
        )
    return files_out


def _env_pairs(proc: ProcessSpec, node_expr) -> list[tuple[str, Shell]]:
    return [(k, shell_word(v, node_expr)) for k, v in proc.env]


def _header(dep: Deployment) -> dict:
    """What the scripts' header comments say: the recipe's name (the schema restricts it to
    [A-Za-z0-9._-]) and values the environment quotes (the schema lets no newline through)."""
    r = dep.recipe
    return {"name": Token(r.name), "model": r.model.path, "version": r.engine.vllm_version or "unknown"}


def _sharing_before(workers, proc) -> list:
    """The servers before `proc` on its node that share one of its GPUs (`devices`): it starts once
    they answer, as `recipectl launch` starts it (each sizes its cache from the memory left free)."""
    earlier = workers[: workers.index(proc)]
    return [q for q in earlier if q.port and q.node == proc.node and set(q.gpus) & set(proc.gpus)]


def render_bash(dep: Deployment) -> list[RenderedFile]:
    """One script per host.

    Each starts its host's servers (a server that shares a GPU once the one before it answers), and
    the router's host the router once every server answers."""
    hosts = dep.recipe.cluster.host_names

    def node_expr(n: int) -> str:
        return hosts[n]

    def health(p: ProcessSpec) -> str:
        return f"http://{hosts[p.node]}:{p.port}/health"

    files_out = []
    for node in dep.nodes_used:
        procs = dep.on_node(node)
        workers = [p for p in procs if p.kind != "router"]
        router = next((p for p in procs if p.kind == "router"), None)
        ctx = {
            **_header(dep),
            "host": hosts[node],
            "node": node,
            "required_env": [Token(n) for n in required_env(dep)],
            "workers": [
                {
                    "name": Token(p.name),
                    "env": _env_pairs(p, node_expr),
                    "cmd": shell_lines(p.argv, node_expr),
                    "after": [health(q) for q in _sharing_before(workers, p)],
                }
                for p in workers
            ],
            "router": None
            if router is None
            else {
                "name": Token(router.name),
                "env": _env_pairs(router, node_expr),
                "cmd": shell_lines(router.argv, node_expr),
                "wait_urls": [health(p) for p in dep.workers if p.port],
            },
            "pinned": [
                {
                    "name": Token(p.name),
                    "index": i,
                    "cores": core_list_text(cores),
                    "health": health(p) if p.port else None,
                }
                for i, p in enumerate(workers)
                if (cores := bound_cores(dict(p.env))) is not None
            ],
        }
        text = environment().get_template("bash.sh.j2").render(**ctx)
        files_out.append(RenderedFile(f"{dep.recipe.name}.{hosts[node]}.sh", text, executable=True))
    return _refuse_secrets(dep, files_out)


def render_slurm(dep: Deployment) -> list[RenderedFile]:
    """An sbatch script.

    One job step per server, with its GPUs from Slurm; the router once every server answers."""
    nodes = dep.nodes_used
    index = {n: i for i, n in enumerate(nodes)}  # recipe node -> position in the job's node list

    r = dep.recipe

    def node_expr(n: int) -> str:
        # hosts the recipe names are used as they are (literals); otherwise the job's own node list
        return r.cluster.hosts[n] if r.cluster.hosts else Var(f"${{NODES[{index[n]}]}}")

    cpus_per_gpu = (
        r.cluster.cpus_per_node // r.cluster.gpus_per_node if r.cluster.cpus_per_node and r.cluster.gpus_per_node else 8
    )
    steps = []
    for p in dep.workers:
        # Slurm gives each step its GPUs (--gpus) and sets CUDA_VISIBLE_DEVICES itself
        env = [(k, v) for k, v in _env_pairs(p, node_expr) if k != "CUDA_VISIBLE_DEVICES"]
        steps.append(
            {
                "name": Token(p.name),
                "node": index[p.node],
                "gpus": len(p.gpus),
                "cpus": cpus_per_gpu * len(p.gpus),
                "env": env,
                "cmd": shell_lines(p.argv, node_expr),
            }
        )
    router = dep.router
    ctx = {
        **_header(dep),
        "nodes": len(nodes),
        "gpus_per_node": 0 if r.cluster.is_cpu else r.cluster.gpus_per_node,
        "required_env": [Token(n) for n in required_env(dep)],
        "steps": steps,
        "router": {
            "name": Token(router.name),
            "node": index[router.node],
            "env": _env_pairs(router, node_expr),
            "cmd": shell_lines(router.argv, node_expr),
            "url": concat("http://", node_expr(router.node), f":{router.port}"),
        },
        "wait_urls": [concat("http://", node_expr(p.node), f":{p.port}/health") for p in dep.workers if p.port],
        "ready_timeout": int(r.launch.ready_timeout_s),
        "container": r.engine.image,
    }
    text = environment().get_template("slurm.sbatch.j2").render(**ctx)
    return _refuse_secrets(dep, [RenderedFile(f"{r.name}.sbatch", text, executable=True)])


def _k8s_name(text: str, limit: int = 40) -> str:
    """A DNS-1123 name; a long one is cut and given a hash of the whole, so variants stay distinct."""
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


_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_K8S_HEADER = """\
# Rendered by recipectl from recipe {name}: model {model}, vLLM {version}.
# Multi-node endpoints are LeaderWorkerSets (leaderworkerset.x-k8s.io), single-node ones
# Deployments; each endpoint and the router get a Service. Secrets referenced as ${{NAME}} in the
# recipe come from a Secret named after the variable (key "value").
"""


def _comment_value(text: str) -> str:
    """A value in a YAML comment: as it is when plain, else JSON-quoted (one line, escapes and all)."""
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def _service(name: str, base: str, role: str, port: int, lws: bool) -> dict:
    selector = {"recipectl/endpoint": name}
    if lws:  # the leader pod of the group
        selector["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": base, "recipectl/role": role}},
        "spec": {"selector": selector, "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }


def _shm_volumes() -> list[dict]:
    return [{"name": "shm", "emptyDir": {"medium": "Memory"}}]


def _vllm_container(
    image: str, command: list[str], env: list[dict], gpus: int, port: int | None = None, args: list[str] | None = None
) -> dict:
    c: dict = {"name": "vllm", "image": image, "command": command}
    if args is not None:
        c["args"] = args
    c["env"] = env
    if port is not None:
        c["ports"] = [{"containerPort": port, "name": "http"}]
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 10, "failureThreshold": 3}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    c["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    return c


def _pod_template(name: str, role: str, container: dict) -> dict:
    return {
        "metadata": {"labels": {"recipectl/endpoint": name, "recipectl/role": role}},
        "spec": {"containers": [container], "volumes": _shm_volumes()},
    }


def _k8s_env(proc: ProcessSpec) -> list[dict]:
    """A process's environment as container env: node addresses from the pod, references from
    Secrets, literals escaped; no CUDA_VISIBLE_DEVICES (each pod gets its GPUs from the device plugin)."""
    out = []
    for k, v in proc.env:
        if isinstance(v, NodeAddress):
            out.append({"name": k, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        elif isinstance(v, EnvRef):
            out.append({"name": k, "valueFrom": {"secretKeyRef": {"name": _k8s_name(v.name), "key": "value"}}})
        elif k != "CUDA_VISIBLE_DEVICES":
            out.append({"name": k, "value": _k8s_literal(str(v))})
    # a reference in the arguments ($(NAME) there) needs the variable in the container too
    named = {k for k, _ in proc.env}
    for name in dict.fromkeys(a.name for a in proc.argv if isinstance(a, EnvRef) and a.name not in named):
        out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": _k8s_name(name), "key": "value"}}})
    return out


def _k8s_service_name(base: str, role: str, endpoint: int) -> str:
    return f"{base}-{role}-{endpoint}"


# A word of a container's command line: a literal (recipe text or one recipectl made), a variable of
# the container (a Secret, the leader's address LWS sets), or the DP start rank of an LWS worker
# (its index times the DP ranks each worker holds, shell arithmetic). Each is written for the
# kubelet (command/args) or for `sh -c`.
_Word = tuple[str, str]  # (kind, text): ("literal", text) | ("variable", NAME) | ("start-rank", N)


def _k8s_words(dep: Deployment, base: str, proc: ProcessSpec, ranks_per_worker: int | None = None) -> list[_Word]:
    """The words of a process's command line in a pod, before either writer escapes them."""
    words: list[_Word] = []
    argv = list(proc.argv)
    i = 0
    while i < len(argv):
        a = argv[i]
        if isinstance(a, NodeAddress):
            words.append(("variable", "LWS_LEADER_ADDRESS"))
        elif isinstance(a, UrlOf):
            owner = next(p for p in dep.workers if p.node == a.node and p.port == a.port)
            words.append(("literal", f"http://{_k8s_service_name(base, owner.kind, owner.endpoint)}:{a.port}"))
        elif isinstance(a, EnvRef):
            words.append(("variable", a.name))
        elif isinstance(a, HomePath):
            # containers run as root unless the image says otherwise
            words.append(("literal", f"/root/{a.rest}"))
        elif a == "--data-parallel-start-rank" and ranks_per_worker is not None:
            words += [("literal", a), ("start-rank", str(int(ranks_per_worker)))]
            i += 1
        elif a == "--host" and i + 1 < len(argv):
            # the recipe's hosts name machines, not pods: in a pod the server listens on the
            # pod's interfaces and its Service decides who reaches it
            words += [("literal", a), ("literal", "0.0.0.0")]
            i += 1
        else:
            words.append(("literal", str(a)))
        i += 1
    return words


def _kubelet_args(words: list[_Word]) -> list[str]:
    """Words as command/args items: the kubelet expands `$(NAME)` from the container's variables
    (a Secret's value becomes one whole argument, never shell text); every literal has its `$`
    doubled so that the kubelet leaves it as it is."""
    out = []
    for kind, text in words:
        if kind == "literal":
            out.append(_k8s_literal(text))
        elif kind == "variable":
            out.append(f"$({text})")
        else:
            raise ValueError(f"a {kind} word needs a shell")
    return out


def _shell_command(words: list[_Word]) -> str:
    """Words as one `sh -c` string that execs the program: literals quoted with shlex, variables
    expanded by the shell from the container's environment when it runs (`"$VLLM_API_KEY"`, one
    word whatever the value holds), the start rank as arithmetic on LWS_WORKER_INDEX. The kubelet
    expands nothing in it: every `$` is doubled, so what the shell reads is exactly this text."""
    parts = []
    for kind, text in words:
        if kind == "literal":
            parts.append(shlex.quote(text))
        elif kind == "variable":
            parts.append('"' + str(Var("$" + Token(text))) + '"')
        else:
            parts.append(f"$((LWS_WORKER_INDEX * {int(text)}))")
    return _k8s_literal("exec " + " ".join(parts))


def _k8s_endpoint(dep: Deployment, base: str, image: str, ep) -> list[dict]:
    """One endpoint's Service, and its Deployment (one node) or LeaderWorkerSet (several)."""
    procs = [p for p in dep.workers if p.kind == ep.role and p.endpoint == ep.index]
    leader = procs[0]
    assert leader.port is not None  # an endpoint's first process serves its HTTP port
    name = _k8s_service_name(base, ep.role, ep.index)
    gpus = len(leader.gpus)
    labels = {"app.kubernetes.io/part-of": base, "recipectl/role": ep.role}
    args = _kubelet_args(_k8s_words(dep, base, leader))
    leader_container = _vllm_container(image, args[:2], _k8s_env(leader), gpus, leader.port, args[2:])
    service = _service(name, base, ep.role, leader.port, lws=ep.multi_node)
    if not ep.multi_node:
        return [
            service,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"recipectl/endpoint": name}},
                    "template": _pod_template(name, ep.role, leader_container),
                },
            },
        ]
    follower = procs[1]
    dp_local = ep.processes[0].dp_local
    # every follower pod shares one template: its start rank comes from its index
    worker_command = ["sh", "-c", _shell_command(_k8s_words(dep, base, follower, ranks_per_worker=dp_local))]
    worker_container = _vllm_container(image, worker_command, _k8s_env(follower), gpus)
    return [
        service,
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": len(procs),
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": _pod_template(name, ep.role, leader_container),
                    "workerTemplate": _pod_template(name, ep.role, worker_container),
                },
            },
        },
    ]


def _k8s_router(dep: Deployment, base: str, image: str) -> list[dict]:
    """The router's Service and Deployment."""
    router = dep.router
    assert router.port is not None  # the router serves the recipe's router.port
    rname = f"{base}-router"
    rargs = _kubelet_args(_k8s_words(dep, base, router))
    return [
        _service(rname, base, "router", router.port, lws=False),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": rname, "labels": {"app.kubernetes.io/part-of": base, "recipectl/role": "router"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"recipectl/endpoint": rname}},
                "template": {
                    "metadata": {"labels": {"recipectl/endpoint": rname, "recipectl/role": "router"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "router",
                                "image": image,
                                "command": rargs[:1],
                                "args": rargs[1:],
                                "env": _k8s_env(router),
                                "ports": [{"containerPort": router.port, "name": "http"}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/health", "port": router.port},
                                    "periodSeconds": 5,
                                },
                            }
                        ]
                    },
                },
            },
        },
    ]


def render_k8s(dep: Deployment) -> list[RenderedFile]:
    """Kubernetes manifests.

    A Deployment (one node) or LeaderWorkerSet (several) and a Service per endpoint, and the router's.

    The manifests are Python data (a list of documents), written by yaml.safe_dump_all: every
    recipe value is a YAML scalar the emitter quotes, never text spliced into YAML."""
    r = dep.recipe
    base = _k8s_name(r.name)
    image = r.engine.image or "vllm/vllm-openai:latest"
    docs = [doc for ep in dep.placement.endpoints for doc in _k8s_endpoint(dep, base, image, ep)]
    docs += _k8s_router(dep, base, image)
    header = _K8S_HEADER.format(
        name=r.name, model=_comment_value(r.model.path), version=_comment_value(r.engine.vllm_version or "unknown")
    )
    body = yaml.safe_dump_all(docs, explicit_start=True, sort_keys=False, width=1 << 16)
    return _refuse_secrets(dep, [RenderedFile(f"{r.name}.k8s.yaml", header + body)])


def render(dep: Deployment, name: str) -> list[RenderedFile]:
    """The files of the registered target `name` (a key of TARGETS) for `dep`."""
    return TARGETS[name].render(dep)


def _check_names(files_out: list[RenderedFile], out_dir: Path) -> None:
    names = [f.name for f in files_out]
    for name in names:
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise RecipectlError(
                f"refusing to write {name!r}: not a file name inside {out_dir}",
                fix="this is a bug in recipectl; please report it with the recipe",
            )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RecipectlError(
                f"two rendered files are both named {name}; nothing was written",
                fix="list each host once in cluster.hosts",
            )
        seen.add(name)


def write(
    files_out: list[RenderedFile], out_dir: Path, *, force: bool = False, inputs: Sequence[str] = ()
) -> list[Path]:
    """Write the files into `out_dir` and nowhere else: each name is a plain file name; an existing
    file is an error unless `force`, and then it is replaced (a symlink by a file, never followed),
    but never one of `inputs` (the recipe rendered, `x.k8s.yaml` rendered into its own directory,
    and what it was read with), whatever `force` says; nothing is written unless every file can be."""
    _check_names(files_out, out_dir)
    if os.path.lexists(out_dir) and not out_dir.is_dir():  # a file, or a device such as /dev/full
        raise RecipectlError(
            f"{out_dir} is not a directory; nothing was written", fix="-o DIR names a directory to write into"
        )
    # the directories this render makes, deepest last: a render that writes nothing takes them away
    made: list[Path] = []
    try:
        _make_dirs(out_dir, made)
    except OSError as e:
        _remove_empty(made)
        raise _unwritable(UnwritableFile(out_dir, e)) from None
    try:
        return _write_into(files_out, out_dir, force=force, inputs=inputs)
    except BaseException:
        _remove_empty(made)
        raise


def _make_dirs(path: Path, made: list[Path]) -> None:
    """``path`` and each directory above it that is not there, made one at a time from the top, as
    the path is written (`new/../old/x` makes `new` and `new/../old/x`); ``made`` gets those this
    call made, and no other: one that was there, or appeared meanwhile, is not this render's."""
    parts = path.parts
    for k in range(1, len(parts) + 1):
        step = Path(*parts[:k])
        try:
            step.mkdir()
        except FileExistsError:
            continue
        made.append(step)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))


def _remove_empty(dirs: list[Path]) -> None:
    """Each of ``dirs`` that is still empty, deepest first (one that is not is left)."""
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            d.rmdir()


def _write_into(files_out: list[RenderedFile], out_dir: Path, *, force: bool, inputs: Sequence[str]) -> list[Path]:
    """write's checks and writes, once ``out_dir`` is there."""
    for f in files_out:
        target = out_dir / f.name
        read = same_file_as(target, list(inputs))
        if read is not None:
            also = f" (as {read})" if read != str(target) else ""
            raise RecipectlError(
                f"refusing to replace {target}: this render reads it{also}; nothing was written",
                fix="render into another directory (-o DIR), or rename the recipe",
            )
    existing = [f.name for f in files_out if os.path.lexists(out_dir / f.name)]
    if existing and not force:
        raise RecipectlError(
            f"{out_dir} already holds {', '.join(existing)}; nothing was written",
            fix="render into an empty directory, or pass --force to replace those files",
        )
    for name in existing:
        p = out_dir / name
        if p.is_dir() and not p.is_symlink():
            raise RecipectlError(f"{p} is a directory; nothing was written", fix="remove it or render elsewhere")
    written = [out_dir / f.name for f in files_out]
    # each in one rename (or, without --force, one link that fails on anything already there: never
    # an existing file, never through a symlink, not even a dangling one); a symlink is replaced.
    # Every file is written out before any is put in place: a full disk leaves the old ones.
    try:
        write_all_atomic(
            [
                (p, f.text, 0o755 if f.executable else 0o666 & ~_umask())
                for p, f in zip(written, files_out, strict=True)
            ],
            replace=force,
        )
    except FileExistsError as e:
        raise RecipectlError(
            f"{e.filename} appeared while rendering; it was left as it is",
            fix="render into an empty directory, or pass --force to replace it",
        ) from None
    except UnwritableFile as e:
        raise _unwritable(e) from None
    return written


def _unwritable(e: UnwritableFile) -> RecipectlError:
    return RecipectlError(
        f"{e.path}: cannot write the rendered files: {e.reason}",
        fix="-o DIR names a directory you can write to, on a disk with room",
    )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
