"""Dynamo's `DynamoGraphDeployment` in both of its CRD versions, read into one list of components,
with the ConfigMaps and Secrets of the same file and each main container's environment.

- `nvidia.com/v1alpha1` (deploy/operator/api/v1alpha1): `spec.services` maps a name to a service
  with `componentType` (frontend | worker | planner...), `subComponentType` (prefill | decode),
  `replicas`, `multinode.nodeCount`, `resources.limits.gpu`, service-level `envs`, `envFromSecret`
  and `extraPodSpec.mainContainer` (image, command, args, env, envFrom); the graph's `spec.envs`.
- `nvidia.com/v1beta1` (the storage version, deploy/operator/api/v1beta1): `spec.components` is a list,
  each with `name`, `type` (frontend | worker | prefill | decode | ...), `replicas`, `multinode`,
  and a Kubernetes `podTemplate` whose container named `main` runs the engine (its GPUs in
  `resources.limits["nvidia.com/gpu"]`); the graph's `spec.env`, before each component's own.

A container's env resolves as Kubernetes resolves it: `value` (with `$(VAR)` of earlier entries),
`valueFrom.configMapKeyRef` and `envFrom.configMapRef` from a ConfigMap of the same file;
a Secret's values, a field reference or a ConfigMap the file does not hold stay unresolved (None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..placeholders import has_reference
from .common import NotImportable
from .shellvars import expand_k8s

PathKey = tuple[str | int, ...]


@dataclass
class Component:
    """One component of the graph, whichever CRD version said it."""

    name: str
    base: PathKey  # its YAML path in the document
    kind: str  # frontend | worker | prefill | decode | planner | ...
    sub: str | None  # v1alpha1's subComponentType
    container: dict  # the main container
    container_base: PathKey
    replicas: int
    gpus: int  # per pod
    replicas_written: str = ""  # `replicas` as written when it is set at deploy time (`${NUM_DECODE_REPLICAS}`)
    env: dict[str, str | None] = field(default_factory=dict)  # name -> value (None: not in this file)
    env_at: dict[str, PathKey] = field(default_factory=dict)  # where each variable is set
    secrets: list[tuple[PathKey, str]] = field(default_factory=list)  # Secrets it reads (named, not read)


def config_maps(docs: list[tuple[Any, dict]]) -> dict[str, dict[str, str]]:
    """The ConfigMaps of the file: name -> data."""
    out: dict[str, dict[str, str]] = {}
    for d, _ in docs:
        if isinstance(d, dict) and d.get("kind") == "ConfigMap":
            name = str((d.get("metadata") or {}).get("name", ""))
            data = d.get("data") or {}
            out[name] = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    return out


def components(data: dict, maps: dict[str, dict[str, str]], file: str) -> list[Component]:
    spec = data.get("spec") or {}
    version = str(data.get("apiVersion", ""))
    if isinstance(spec.get("components"), list) or version.endswith("/v1beta1"):
        graph = _graph_env(spec, "env")
        return [_v1beta1(c, k, maps, graph) for k, c in enumerate(spec.get("components") or []) if isinstance(c, dict)]
    services = spec.get("services") or {}
    if not isinstance(services, dict):
        raise NotImportable(f"{file}: spec.services is not a mapping of services")
    graph = _graph_env(spec, "envs")
    return [_v1alpha1(name, svc, maps, graph) for name, svc in services.items() if isinstance(svc, dict)]


def _graph_env(spec: dict, key: str) -> tuple[list, PathKey]:
    """The graph's own environment, which the operator puts first in every component's: v1beta1's
    `spec.env` ("prepended to every component's environment. Component-specific env entries with
    the same name take precedence and may reference values from this list"), v1alpha1's
    `spec.envs` ("applied to all services in the deployment unless overridden by
    service-specific configuration")."""
    items = spec.get(key)
    return (items if isinstance(items, list) else []), ("spec", key)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _written(value: Any) -> str:
    return value if isinstance(value, str) and has_reference(value) else ""


def _v1alpha1(name: str, svc: dict, maps: dict[str, dict[str, str]], graph: tuple[list, PathKey]) -> Component:
    base: PathKey = ("spec", "services", name)
    main = (svc.get("extraPodSpec") or {}).get("mainContainer") or {}
    gpus = _int(((svc.get("resources") or {}).get("limits") or {}).get("gpu"), 1)
    c = Component(
        name,
        base,
        str(svc.get("componentType") or ""),
        svc.get("subComponentType"),
        main,
        base + ("extraPodSpec", "mainContainer"),
        _int(svc.get("replicas"), 1),
        gpus,
        _written(svc.get("replicas")),
    )
    _env(c, *graph, maps)
    _env(c, svc.get("envs") or [], base + ("envs",), maps)
    _env(c, main.get("env") or [], c.container_base + ("env",), maps)
    _env_from(c, main.get("envFrom") or [], c.container_base + ("envFrom",), maps)
    if svc.get("envFromSecret"):
        c.secrets.append((base + ("envFromSecret",), str(svc["envFromSecret"])))
    return c


def _v1beta1(comp: dict, k: int, maps: dict[str, dict[str, str]], graph: tuple[list, PathKey]) -> Component:
    base: PathKey = ("spec", "components", k)
    containers = ((comp.get("podTemplate") or {}).get("spec") or {}).get("containers") or []
    index = next((i for i, ct in enumerate(containers) if isinstance(ct, dict) and ct.get("name") == "main"), None)
    main = containers[index] if index is not None else {}
    cbase = base + ("podTemplate", "spec", "containers", index if index is not None else 0)
    limits = (main.get("resources") or {}).get("limits") or {}
    gpus = _int(limits.get("nvidia.com/gpu", limits.get("gpu")), 1)
    c = Component(
        str(comp.get("name", f"component-{k}")),
        base,
        str(comp.get("type") or ""),
        None,
        main,
        cbase,
        _int(comp.get("replicas"), 1),
        gpus,
        _written(comp.get("replicas")),
    )
    _env(c, *graph, maps)
    _env(c, main.get("env") or [], cbase + ("env",), maps)
    _env_from(c, main.get("envFrom") or [], cbase + ("envFrom",), maps)
    return c


def _env(c: Component, items: list, base: PathKey, maps: dict[str, dict[str, str]]) -> None:
    for k, item in enumerate(items):
        if not isinstance(item, dict) or "name" not in item:
            continue
        name, where = str(item["name"]), base + (k,)
        c.env_at[name] = where
        if "value" in item:
            value = expand_k8s(str(item["value"]), c.env)  # $(VAR) of the entries above it
            c.env[name] = value.text if not value.unresolved else str(item["value"])
            continue
        ref = (item.get("valueFrom") or {}).get("configMapKeyRef") or {}
        data = maps.get(str(ref.get("name", "")))
        c.env[name] = data.get(str(ref.get("key", ""))) if data is not None else None
        secret = (item.get("valueFrom") or {}).get("secretKeyRef")
        if secret:
            c.secrets.append((where, str(secret.get("name", ""))))


def _env_from(c: Component, items: list, base: PathKey, maps: dict[str, dict[str, str]]) -> None:
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        prefix = str(item.get("prefix", ""))
        cm = item.get("configMapRef") or {}
        if cm and str(cm.get("name", "")) in maps:
            for key, value in maps[str(cm["name"])].items():
                c.env[prefix + key] = value
                c.env_at[prefix + key] = base + (k,)
        secret = item.get("secretRef")
        if secret:
            c.secrets.append((base + (k,), str(secret.get("name", ""))))
