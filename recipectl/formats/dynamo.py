"""Dynamo `DynamoGraphDeployment` manifests (nvidia.com/v1alpha1) whose workers run vLLM.

The shape is Dynamo's (`deploy/` CRDs and `recipes/*/vllm/disagg*/deploy.yaml`): `spec.services`,
each with `componentType` (frontend | worker), `subComponentType` (prefill | decode), `replicas`,
`multinode.nodeCount`, `resources.limits.gpu` (per pod), and `extraPodSpec.mainContainer` with
`image`, `env` ({name, value}), `command` and `args`. A worker runs `python3 -m dynamo.vllm` with
vLLM's own flags plus Dynamo's role flags (`--disaggregation-mode prefill|decode`, or the older
`--is-prefill-worker` / `--is-decode-worker`); `args` is either the argument list itself or, under
`command: [/bin/bash, -c]`, a shell script. Without `--kv-transfer-config`, dynamo.vllm sets up
NIXL for disaggregated workers. Other documents of the file (a ConfigMap) are not read.
"""

from __future__ import annotations

from typing import Any, Callable

from .common import (
    GPUS_PER_NODE,
    Imported,
    NotImportable,
    Origin,
    apply_role,
    block_script,
    gpu_in_text,
    model_from_flags,
    nodes_needed,
    origin_in,
    placeholder_workload,
    safe_name,
    set_gpu,
    set_role_env,
    yaml_documents,
)
from .flags import read_flags
from .names import DYNAMO
from .shapes import DynamoGraph, check
from .shellwords import Word, shell_words


def import_dynamo(text: str, file: str) -> Imported:
    docs = [(d, p) for d, p in yaml_documents(text, file)
            if isinstance(d, dict) and d.get("kind") == "DynamoGraphDeployment"]
    if len(docs) != 1:
        raise NotImportable(f"{file}: {len(docs)} DynamoGraphDeployment documents; recipectl reads one")
    data, pos = docs[0]
    check(DynamoGraph, data, file, pos)
    imp = Imported(DYNAMO, file, files=[file])

    o = origin_in(file, pos)
    spec = data.get("spec") or {}
    services: dict[str, Any] = spec.get("services") or {}
    imp.set(("version",), 1)
    imp.set(("name",), safe_name(str((data.get("metadata") or {}).get("name", "imported"))),
            o("metadata", "name"))
    workers: dict[str, tuple[str, dict, Any]] = {}
    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        base = ("spec", "services", name)
        if svc.get("componentType") == "frontend" or "Frontend" in name:
            imp.drop(o(*base), f"service {name}", "Dynamo's frontend: recipectl renders its own router")
            continue
        main = ((svc.get("extraPodSpec") or {}).get("mainContainer") or {})
        words, words_base = _argv(main, text, pos, base + ("extraPodSpec", "mainContainer"), file)
        if words is None:
            imp.drop(o(*base), f"service {name}", "its container does not run dynamo.vllm or vllm serve")
            continue
        flags = read_flags(words, positional_model=words_base == "vllm")
        role = flags.role[0] if flags.role else svc.get("subComponentType")
        if role not in ("prefill", "decode"):
            role = "prefill" if "prefill" in name.lower() else "decode" if "decode" in name.lower() else None
        if role is None:
            raise NotImportable(f"{file}:{o(*base).line}: worker {name} is neither prefill nor decode; recipectl "
                                "deploys prefill/decode pairs")
        if role in workers:
            raise NotImportable(f"{file}:{o(*base).line}: a second {role} service ({name}); recipectl has one "
                                f"per role (use replicas)")
        workers[role] = (name, svc, flags)
        if flags.kv_config is None:  # dynamo.vllm's default for a disaggregated worker
            sub = o(*base, "subComponentType")
            where = flags.role[1] if flags.role else Word(role, sub.line, sub.col)
            flags.kv_config = ({"kv_connector": "NixlConnector"}, where)
        apply_role(imp, role, flags, file, endpoint_origin=o(*base))
        model_from_flags(imp, flags, file)
        imp.set((role, "endpoints"), int(svc.get("replicas", 1)), o(*base, "replicas") if "replicas" in svc
                else o(*base))
        if main.get("image") and imp.get(("engine", "image")) is None:
            imp.set(("engine", "image"), str(main["image"]), o(*base, "extraPodSpec", "mainContainer", "image"))
        _container_env(imp, role, main, svc, base, o)
    if set(workers) != {"prefill", "decode"}:
        raise NotImportable(f"{file}: workers for {sorted(workers) or 'no role'}; recipectl deploys a prefill and "
                            "a decode worker (an aggregated graph is not P/D)")
    if imp.get(("model", "path")) is None:
        raise NotImportable(f"{file}: no --model in the workers' arguments")
    imp.at(("engine",), imp.origins.get(("engine", "image"), o("spec")))
    _cluster(imp, text, file, workers, o)
    placeholder_workload(imp, o("spec"))
    return imp


def _container_env(imp: Imported, role: str, main: dict, svc: dict, base: tuple, o: Callable[..., Origin]) -> None:
    """A worker's environment: its container's env (values; a reference cannot be read) and the
    secret it names (said, not read)."""
    for k, item in enumerate(main.get("env") or []):
        where = o(*base, "extraPodSpec", "mainContainer", "env", k)
        if not isinstance(item, dict) or "name" not in item:
            continue
        if "value" not in item:
            imp.drop(where, f"env {item['name']}", "set from a reference (valueFrom): recipectl cannot read it")
            continue
        set_role_env(imp, role, str(item["name"]), item["value"], where)
    if svc.get("envFromSecret"):
        imp.drop(o(*base, "envFromSecret"), f"envFromSecret: {svc['envFromSecret']}",
                 "a Kubernetes secret: recipectl does not read it (set the variables by reference in env)")


def _argv(main: dict, text: str, pos: dict, base: tuple, file: str) -> tuple[list[Word] | None, str]:
    """The server's arguments after `python3 -m dynamo.vllm` (or `vllm serve`), with positions."""
    command = [str(c) for c in main.get("command") or []]
    args = main.get("args") or []
    words: list[Word] = []
    if len(command) >= 2 and command[-1] == "-c" and args:  # bash -c SCRIPT
        line, col = pos.get(base + ("args", 0), pos[()])
        block = block_script(text, line, col)
        if block is not None:
            commands = shell_words(str(args[0]), block[0], block[1], block_indent=block[1])
        else:
            commands = shell_words(str(args[0]), line, col - 1)
    else:
        for k, item in enumerate(command):
            line, col = pos.get(base + ("command", k), pos[()])
            words.append(Word(item, line, col))
        for k, item in enumerate(args):
            line, col = pos.get(base + ("args", k), pos[()])
            words.append(Word(str(item), line, col))
        commands = [words]
    for cmd in commands:
        texts = [w.text for w in cmd]
        for i, t in enumerate(texts):
            if t == "dynamo.vllm" and i >= 1 and texts[i - 1] == "-m":
                return cmd[i + 1:], "dynamo"
            if t == "serve" and i >= 1 and texts[i - 1].endswith("vllm"):
                return cmd[i + 1:], "vllm"
    return None, ""


def _cluster(imp: Imported, text: str, file: str, workers: dict, o) -> None:
    gpu, _ = set_gpu(imp, gpu_in_text(text, file), assumed=o("spec"), says="the manifest names")
    per_pod = [int(((svc.get("resources") or {}).get("limits") or {}).get("gpu", 1)) for _, svc, _ in
               workers.values()]
    gpn = max([GPUS_PER_NODE.get(gpu, 8), *per_pod])
    imp.set(("cluster", "gpus_per_node"), gpn, o("spec", note="the largest GPU limit of a pod"))
    imp.set(("cluster", "nodes"), nodes_needed(imp, gpn), o("spec", note="the workers' GPUs over whole nodes"))
