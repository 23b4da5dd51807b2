"""Dynamo `DynamoGraphDeployment` manifests whose workers run vLLM, in both CRD versions
(nvidia.com/v1alpha1 `spec.services`, nvidia.com/v1beta1 `spec.components`: dynamo_crd.py).

A worker runs `python3 -m dynamo.vllm` with vLLM's own flags plus Dynamo's role flags
(`--disaggregation-mode prefill|decode`, or the older `--is-prefill-worker` / `--is-decode-worker`;
without them its subComponentType or type says the role); `args` is either the argument list
itself (Kubernetes' `$(VAR)` expanded from the container's env, a ConfigMap of the same file
included) or, under `command: [/bin/bash, -c]` or `-lc`, a shell script whose variables the shell
expands (shellvars.py). Without `--kv-transfer-config`, dynamo.vllm sets up NIXL for disaggregated
workers. A value the file does not hold (a Secret, an envsubst placeholder such as `${VLLM_IMAGE}`)
stays as written, and IMP001 says so. Another engine (`backendFramework: sglang | trtllm`, a
worker running dynamo.sglang or dynamo.trtllm) is refused in one line.

Dynamo states no workload: the recipe has none (its benchmark is a separate manifest).
"""

from __future__ import annotations

from dataclasses import replace
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
    other_backend,
    safe_name,
    set_gpu,
    set_role_env,
    unread_model,
    yaml_documents,
)
from .dynamo_crd import Component, components, config_maps
from .flags import read_flags
from .names import DYNAMO
from .shapes import DynamoConfigMapDocument, DynamoGraph, check
from .shellvars import Scope, expand_k8s, expand_words, located, read_assignments
from .shellwords import Word, shell_words


def import_dynamo(text: str, file: str) -> Imported:
    """Dynamo DynamoGraphDeployment manifests whose workers run dynamo.vllm."""
    all_docs = yaml_documents(text, file)
    docs = [(d, p) for d, p in all_docs if isinstance(d, dict) and d.get("kind") == "DynamoGraphDeployment"]
    if len(docs) != 1:
        raise NotImportable(f"{file}: {len(docs)} DynamoGraphDeployment documents; recipectl reads one")
    data, pos = docs[0]
    check(DynamoGraph, data, file, pos)
    for doc, doc_pos in all_docs:  # the ConfigMaps a container's env reads, checked as the graph is
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
            under = {("ConfigMap", *path): at for path, at in doc_pos.items()} | {(): doc_pos[()]}
            check(DynamoConfigMapDocument, {"ConfigMap": doc}, file, under)
    imp = Imported(DYNAMO, file, files=[file])

    o = origin_in(file, pos)
    spec = data.get("spec") or {}
    backend = str(spec.get("backendFramework") or "vllm").lower()
    if backend != "vllm":
        raise other_backend(backend, f"{file}:{o('spec', 'backendFramework').line}")
    imp.set(("version",), 1)
    imp.set(("name",), safe_name(str((data.get("metadata") or {}).get("name", "imported"))), o("metadata", "name"))
    workers: dict[str, tuple[str, Component, Any]] = {}
    for comp in components(data, config_maps(all_docs), file):
        base = comp.base
        what = "service" if base[1] == "services" else "component"  # v1alpha1's word, v1beta1's
        if comp.kind == "frontend" or "Frontend" in comp.name:
            imp.drop(o(*base), f"{what} {comp.name}", "Dynamo's frontend: recipectl renders its own router")
            continue
        words, words_base = _argv(comp, text, pos, file)
        if words is None:
            imp.drop(o(*base), f"{what} {comp.name}", "its container does not run dynamo.vllm or vllm serve")
            continue
        flags = read_flags(words, positional_model=words_base == "vllm")
        hint = comp.sub or (comp.kind if comp.kind in ("prefill", "decode") else None)
        role = flags.role[0] if flags.role else hint
        if role not in ("prefill", "decode"):
            lower = comp.name.lower()
            role = "prefill" if "prefill" in lower else "decode" if "decode" in lower else None
        if role is None:
            raise NotImportable(
                f"{file}:{o(*base).line}: worker {comp.name} is neither prefill nor decode; "
                "recipectl deploys prefill/decode pairs"
            )
        if role in workers:
            raise NotImportable(
                f"{file}:{o(*base).line}: a second {role} component ({comp.name}); recipectl has "
                f"one per role (use replicas)"
            )
        workers[role] = (comp.name, comp, flags)
        if flags.kv_config is None:  # dynamo.vllm's default for a disaggregated worker
            sub = o(*base, "subComponentType") if comp.sub else o(*base, "type")
            where = flags.role[1] if flags.role else Word(role, sub.line, sub.col)
            flags.kv_config = ({"kv_connector": "NixlConnector"}, where)
        apply_role(imp, role, flags, file, endpoint_origin=o(*base))
        model_from_flags(imp, flags, file)
        imp.set((role, "endpoints"), comp.replicas, o(*base, "replicas") if (*base, "replicas") in pos else o(*base))
        if comp.replicas_written:
            imp.drop(
                o(*base, "replicas"),
                f"replicas: {comp.replicas_written}",
                "set at deploy time: one endpoint assumed (set the count the deployment uses)",
            )
        image = comp.container.get("image")
        if image and imp.get(("engine", "image")) is None:
            imp.set(("engine", "image"), str(image), o(*comp.container_base, "image"))
        _container_env(imp, role, comp, o)
    if set(workers) != {"prefill", "decode"}:
        raise NotImportable(
            f"{file}: workers for {sorted(workers) or 'no role'}; recipectl deploys a prefill and "
            "a decode worker (an aggregated graph is not P/D)"
        )
    if imp.get(("model", "path")) is None:
        unread = next((f.unread_model for _, _, f in workers.values() if f.unread_model is not None), None)
        if unread is not None:
            raise unread_model(file, unread)
        raise NotImportable(f"{file}: no --model in the workers' arguments")
    imp.at(("engine",), imp.origins.get(("engine", "image"), o("spec")))
    _cluster(imp, text, file, workers, o)
    return imp


def _container_env(imp: Imported, role: str, comp: Component, o: Callable[..., Origin]) -> None:
    """A worker's environment as its container gets it (dynamo_crd.py); what comes from a Secret or a
    field reference is said, not read."""
    for name, value in comp.env.items():
        where = o(*comp.env_at[name])
        if value is None:
            imp.drop(
                where,
                f"env {name}",
                "set from a Secret, a field reference or a ConfigMap not in this file: recipectl cannot read it",
            )
        elif name == "KV_TRANSFER_CONFIG" or "\n" in value:
            continue  # read where the command line uses it
        else:
            set_role_env(imp, role, name, value, where)
    for path, secret in comp.secrets:
        imp.drop(
            o(*path),
            f"secret {secret}",
            "a Kubernetes Secret: recipectl does not read it (its values stay in the cluster)",
        )


_OTHER_ENGINES = {"dynamo.sglang": "sglang", "dynamo.trtllm": "trtllm", "sglang.launch_server": "sglang"}


def _argv(comp: Component, text: str, pos: dict, file: str) -> tuple[list[Word] | None, str]:
    """The server's arguments after `python3 -m dynamo.vllm` (or `vllm serve`), with positions:
    Kubernetes' `$(VAR)` expanded from the container's env, and a `bash -c` / `bash -lc` script's
    own variables as the shell expands them (the container's env exported to it)."""
    main, base = comp.container, comp.container_base
    command = [str(c) for c in main.get("command") or []]
    args = main.get("args") or []
    if len(command) >= 2 and command[-1] in ("-c", "-lc", "-cl") and args:  # bash -c SCRIPT
        line, col = pos.get(base + ("args", 0), pos[()])
        block = block_script(text, line, col)
        if block is not None:
            commands = shell_words(str(args[0]), block[0], block[1], block_indent=block[1], k8s_references=True)
        else:
            commands = shell_words(str(args[0]), line, col - 1, k8s_references=True)
        scope = Scope(file=file)
        for name, value in comp.env.items():
            if value is not None:
                scope.assign(name, value, Word(name, line, col), export=True)
        expanded = []
        for cmd in commands:
            cmd = [_k8s_word(w, comp.env, file) for w in cmd]
            if read_assignments(cmd, scope):
                continue
            expanded.append(expand_words(cmd, scope))
        commands = expanded
    else:
        words: list[Word] = []
        for key, items in (("command", command), ("args", args)):
            for k, item in enumerate(items):
                line, col = pos.get(base + (key, k), pos[()])
                words.append(_k8s_word(Word(str(item), line, col), comp.env, file))
        commands = [words]
    for cmd in commands:
        texts = [w.text for w in cmd]
        for i, t in enumerate(texts):
            if t == "dynamo.vllm" and i >= 1 and texts[i - 1] == "-m":
                return cmd[i + 1 :], "dynamo"
            if t == "serve" and i >= 1 and texts[i - 1].endswith("vllm"):
                return cmd[i + 1 :], "vllm"
            if t in _OTHER_ENGINES and i >= 1 and texts[i - 1] == "-m":
                raise other_backend(_OTHER_ENGINES[t], f"{file}:{cmd[i].line}")
    return None, ""


def _k8s_word(w: Word, env: dict[str, str | None], file: str) -> Word:
    if w.items is not None:  # an array's items: each its own word, as Kubernetes sees them
        return replace(w, items=tuple(_k8s_word(item, env, file) for item in w.items))
    with located(file, w):
        e = expand_k8s(w.text, env)
    return w if e.unresolved or e.text == w.text else replace(w, text=e.text, literal=())


def _cluster(imp: Imported, text: str, file: str, workers: dict, o) -> None:
    gpu, _ = set_gpu(imp, gpu_in_text(text, file), assumed=o("spec"), says="the manifest names")
    per_pod = [comp.gpus for _, comp, _ in workers.values()]
    gpn = max([GPUS_PER_NODE.get(gpu, 8), *per_pod])
    imp.set(("cluster", "gpus_per_node"), gpn, o("spec", note="the largest GPU limit of a pod"))
    imp.set(("cluster", "nodes"), nodes_needed(imp, gpn), o("spec", note="the workers' GPUs over whole nodes"))
