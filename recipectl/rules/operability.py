"""Operability: secrets, router and deployment hygiene."""

from __future__ import annotations

import re
from typing import Iterator

from ..diagnostics import Category, Severity
from ..schema import is_loopback
from .context import RuleContext
from .registry import Violation, rule

_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY)", re.I)
_ENV_REF = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}?$")


@rule(code="OPS001", name="operability.literal-secret", title="Secrets by env reference only",
      severity=Severity.ERROR, category=Category.OPERABILITY,
      applies="every env entry",
      source="recipectl policy: rendered scripts and logs must not contain credentials")
def literal_secret(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That an environment variable named like a credential (`HF_TOKEN`, `*_API_KEY`, ...) is set
    by reference (`${HF_TOKEN}`), never as a literal value.

    Why:
    recipectl renders env into scripts, manifests and run logs that get pasted, committed and
    attached to tickets. A reference is expanded on the node at run time; the value never lands
    in a file.

    Example:
        engine:
          env: {HF_TOKEN: hf_abc123}

    Fix:
        engine:
          env: {HF_TOKEN: ${HF_TOKEN}}
    """
    sources = [("engine.env", ctx.recipe.engine.env)] + [(f"{r}.env", s.env) for r, s in ctx.roles()]
    for prefix, env in sources:
        for name, value in env.items():
            if _SECRET_NAME.search(name) and value and not _ENV_REF.match(value):
                yield Violation(f"{prefix}.{name}", f"{name} holds a literal value",
                                f"{prefix.split('.')[0]}:\n  env: {{{name}: ${{{name}}}}}")


@rule(code="OPS002", name="operability.router-policy", title="Router policy per pool",
      severity=Severity.INFO, category=Category.OPERABILITY,
      applies="vllm-router with several endpoints in a pool",
      source="vllm-router 0.1.17 (--prefill-policy / --decode-policy)")
def router_policy(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a router in front of several prefill endpoints picks a prefill policy explicitly.

    Why:
    vllm-router's default policy differs between releases; for many prefill endpoints the seed's
    style of deployment wants load spread by queue length (`power_of_two`) or cache affinity
    (`cache_aware`), not whatever the default is this month.

    Example:
        prefill: {endpoints: 4}
        router: {}

    Fix:
        router:
          prefill_policy: power_of_two
    """
    r = ctx.recipe.router
    if r.kind == "vllm-router" and ctx.recipe.prefill.endpoints > 1 and not (r.policy or r.prefill_policy):
        yield Violation("router.prefill_policy",
                        f"{ctx.recipe.prefill.endpoints} prefill endpoints behind the router's default policy",
                        "router:\n  prefill_policy: power_of_two")


def has_api_key(ctx: RuleContext, role: str) -> bool:
    """`--api-key` in the role's extra_args, or VLLM_API_KEY set by reference in its environment."""
    args = ctx.recipe.roles[role].extra_args
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        return True
    value = ctx.recipe.role_env(role).get("VLLM_API_KEY")
    return bool(value) and _ENV_REF.match(value) is not None


@rule(code="OPS003", name="operability.exposed-without-api-key", title="Servers beyond loopback need an API key",
      severity=Severity.WARNING, category=Category.OPERABILITY,
      applies="every role whose servers listen on an address other hosts can reach",
      source="vLLM security guide (docs/usage/security.md): vllm serve --api-key / VLLM_API_KEY")
def exposed_without_api_key(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That the servers of a role which listen beyond loopback (the recipe names no hosts, so they
    listen on 0.0.0.0, or names hosts other than 127.0.0.1 / ::1 / localhost) require an API key:
    `--api-key` in the role's `extra_args`, or `VLLM_API_KEY` set by reference in its environment.

    Why:
    `vllm serve` answers anyone who reaches its port: completions on your GPUs, and more. A
    recipe that only names 127.0.0.1 keeps its servers on this machine; any other address
    exposes them to the network the node sits on. An API key set by reference keeps the key out
    of the rendered files.

    Example:
        cluster: {gpu: H200, nodes: 2, hosts: [gpu-a.example, gpu-b.example]}

    Fix:
        engine:
          env:
            VLLM_API_KEY: ${VLLM_API_KEY}
    """
    hosts = ctx.recipe.cluster.hosts
    for role, _spec in ctx.roles():
        used = sorted(ctx.placement.hosts_of.get(role, set()))
        if hosts and used and all(is_loopback(h) for h in used):
            continue
        if has_api_key(ctx, role):
            continue
        where = ", ".join(h for h in used if not is_loopback(h)) if hosts else "0.0.0.0 (every interface)"
        yield Violation(f"{role}.env", f"{role} servers listen on {where} without an API key",
                        "engine:\n  env:\n    VLLM_API_KEY: ${VLLM_API_KEY}")
