"""Operability: secrets, router and deployment hygiene."""

from __future__ import annotations

from typing import Any, Iterator

from ..diagnostics import Category, Severity
from ..fieldtypes import is_loopback
from ..secretscan import pure_reference, secret_flag, secret_name, secret_value
from .context import RuleContext
from .registry import Violation, rule
from .selection import UnknownSelector, matching


@rule(
    code="OPS001",
    name="operability.literal-secret",
    title="Secrets by env reference only",
    severity=Severity.ERROR,
    category=Category.SECURITY,
    applies="every env entry",
    source="recipectl policy: rendered scripts and logs must not contain credentials",
)
def literal_secret(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That an environment variable named like a credential (`HF_TOKEN`, `*_API_KEY`, `*_KEY`,
    `*_PASSWORD`, `*_PASSWD`, `*_SECRET`, `*_PAT`, `*_CREDENTIALS`, ...) is set by reference
    (`${HF_TOKEN}`), never as a literal value — and not as a reference with a literal default
    (`${HF_TOKEN:-hf_...}`), which is the literal whenever the variable is unset.

    Why:
    recipectl renders env into scripts, manifests and run logs that get pasted, committed and
    attached to tickets. A reference is expanded on the node at run time; the value never lands
    in a file. A default after `:-` is written out as it stands.

    Example:
        engine:
          env: {HF_TOKEN: hf_abc123, DB_PASSWD: hunter2}

    Fix:
        engine:
          env: {HF_TOKEN: ${HF_TOKEN}}
    """
    sources = [("engine.env", ctx.recipe.engine.env)] + [(f"{r}.env", s.env) for r, s in ctx.roles()]
    for prefix, env in sources:
        for name, value in env.items():
            if secret_name(name) and value and not pure_reference(value):
                yield Violation(
                    f"{prefix}.{name}",
                    f"{name} holds a literal value",
                    f"{prefix.split('.')[0]}:\n  env: {{{name}: ${{{name}}}}}",
                )


@rule(
    code="OPS002",
    name="operability.router-policy",
    title="Router policy per pool",
    severity=Severity.INFO,
    category=Category.OPERABILITY,
    applies="vllm-router with several endpoints in a pool",
    source="vllm-router 0.1.17 (--prefill-policy / --decode-policy)",
)
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
        yield Violation(
            "router.prefill_policy",
            f"{ctx.recipe.prefill.endpoints} prefill endpoints behind the router's default policy",
            "router:\n  prefill_policy: power_of_two",
        )


def has_api_key(ctx: RuleContext, role: str) -> bool:
    """`--api-key` in the role's extra_args, or VLLM_API_KEY set by reference in its environment."""
    args = ctx.recipe.roles[role].extra_args
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        return True
    value = ctx.recipe.role_env(role).get("VLLM_API_KEY")
    return pure_reference(value) if value else False


@rule(
    code="OPS003",
    name="operability.exposed-without-api-key",
    title="Servers beyond loopback need an API key",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="every role whose servers listen on an address other hosts can reach",
    source="vLLM security guide (docs/usage/security.md): vllm serve --api-key / VLLM_API_KEY",
)
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
        # a role whose endpoints were not placed (TOP001) is judged by the hosts the recipe names
        used = sorted(ctx.placement.hosts_of.get(role, set()) or set(hosts or ()))
        if hosts and used and all(is_loopback(h) for h in used):
            continue
        if has_api_key(ctx, role):
            continue
        where = ", ".join(h for h in used if not is_loopback(h)) if hosts else "0.0.0.0 (every interface)"
        yield Violation(
            f"{role}.env",
            f"{role} servers listen on {where} without an API key",
            "engine:\n  env:\n    VLLM_API_KEY: ${VLLM_API_KEY}",
        )


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(dotted path, text) of every string in a dumped recipe section."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}.{i}")


def _covered_elsewhere(ctx: RuleContext, path: str) -> bool:
    """Findings OPS001 (credential-named env) and OPS004 (credential flags) make already."""
    parts = path.split(".")
    if len(parts) == 3 and parts[1] == "env" and secret_name(parts[2]):
        return True
    if len(parts) == 3 and parts[1] == "extra_args" and parts[2].isdigit():
        args = ctx.recipe.router.extra_args if parts[0] == "router" else ctx.recipe.roles[parts[0]].extra_args
        i = int(parts[2])
        return secret_flag(args[i]) is not None or (
            i > 0 and secret_flag(args[i - 1]) is not None and "=" not in args[i - 1]
        )
    return False


@rule(
    code="OPS005",
    name="operability.secret-value",
    title="No credential-shaped value anywhere in a recipe",
    severity=Severity.ERROR,
    category=Category.SECURITY,
    applies="every string of the recipe (env values, arguments, commands, paths, connector config)",
    source="recipectl policy; token formats of Hugging Face, OpenAI, GitHub, GitLab, AWS, Slack, JWT",
)
def secret_value_anywhere(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no value in the recipe looks like a credential, whatever its key is called: a token
    format with a known prefix (`hf_...` with 8 or more letters and digits not all lower case,
    `sk-...`, `ghp_...`, `github_pat_...`, `glpat-...`, `AKIA...`, `xoxb-...`, a JWT, a PEM private
    key), a password in a URL (`user:pass@host`) or a credential parameter of a URL (`?token=`,
    `&api_key=`, `access_token=`, `sig=`), including inside the default of a reference
    (`${VAR:-hf_...}`).

    Why:
    A name such as `HF_TOKEN` is only one place a token ends up: it is pasted into an argument,
    a URL or an innocently named variable just as often. Every string of a recipe is rendered
    into scripts and manifests and recorded in the run state. An `ignore:` of this rule (or of
    OPS001/OPS004) silences validate only: `render` refuses to write a credential into any target
    whatever the ignores say, and `show`, `plan` and `expand` print it as `<redacted>`.

    Example:
        engine:
          env: {HUB_CONFIG: "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}

    Fix:
        engine:
          env: {HUB_CONFIG: ${HUB_CONFIG}}   # set on the node, never in the recipe
    """
    # Every value, the schema's defaults with them: those are recipectl's own constants, none
    # credential-shaped (tests/test_secrets_everywhere.py checks), so they add no finding. Leaving
    # them out (exclude_defaults) would make each section's default to compare with, and build the
    # validator of every section for it: a third of the schema's build time on each `validate`.
    data = ctx.recipe.model_dump(mode="json")
    for path, text in _strings(data, ""):
        if path.startswith("ignore."):
            continue
        if pure_reference(text) or not secret_value(text) or _covered_elsewhere(ctx, path):
            continue
        key = path.rsplit(".", 1)[-1]
        name = key if not key.isdigit() else "VALUE"
        yield Violation(
            path,
            "this value looks like a credential (a token format or a password in a URL)",
            f"write a reference instead, set where the process runs: ${{{name.upper()}}}",
        )


@rule(
    code="OPS004",
    name="operability.secret-argument",
    title="Credential arguments by env reference only",
    severity=Severity.ERROR,
    category=Category.SECURITY,
    applies="extra_args of prefill, decode and the router",
    source="recipectl policy; vllm serve --api-key (VLLM_API_KEY), vllm-router --api-key",
)
def secret_argument(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a credential flag in `extra_args` (`--api-key`, `--token`, `--hf-token`, `--password`,
    `--secret`, ...) is given a reference (`${VLLM_API_KEY}`), never a literal value.

    Why:
    `extra_args` are copied verbatim into every rendered script and manifest and into the run
    state, and every user of the host reads a process's arguments with `ps`. vLLM reads its API
    key from the environment too (`VLLM_API_KEY`), which keeps it out of the command line
    altogether.

    Example:
        decode:
          extra_args: [--api-key, sk-live-0123456789abcdef]

    Fix:
        decode:
          env: {VLLM_API_KEY: ${VLLM_API_KEY}}   # and no --api-key in extra_args
    """
    sources = [(f"{r}.extra_args", s.extra_args) for r, s in ctx.roles()]
    sources.append(("router.extra_args", ctx.recipe.router.extra_args))
    for prefix, args in sources:
        for i, arg in enumerate(args):
            flag = secret_flag(arg)
            if flag is None:
                continue
            if "=" in arg:
                value, at = arg.split("=", 1)[1], i
            elif i + 1 < len(args):
                value, at = args[i + 1], i + 1
            else:
                continue
            if value and not pure_reference(value):
                section = prefix.split(".")[0]
                if flag.lower().startswith("--api-key"):
                    fix = f"{section}:\n  env: {{VLLM_API_KEY: ${{VLLM_API_KEY}}}}   # and no {flag} in extra_args"
                else:
                    var = flag.strip("-").upper().replace("-", "_")
                    fix = f"{section}:\n  extra_args: [{flag}, ${{{var}}}]"
                yield Violation(f"{prefix}.{at}", f"{flag} is given a literal value", fix)


@rule(
    code="OPS006",
    name="operability.unknown-ignore",
    title="Every ignore: entry names a rule",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="every key of the recipe's ignore:",
    source="recipectl policy; as ruff reports a noqa code that names no rule",
)
def unknown_ignore(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That each key of `ignore:` is a rule code (`HYB001`), a code prefix (`HYB`, `VER0`), a rule
    name (`hybrid.ds-layout-missing`) or a family of names (`hybrid`), as `recipectl rules` lists
    them; schema codes (SCH...) cannot be ignored.

    Why:
    A misspelt code ignores nothing: the finding it was meant to silence still appears (or, worse,
    a later edit that fixes the spelling silences a different rule than the reason describes), and
    the reason reads as if a decision had been recorded.

    Example:
        ignore:
          CAP01: the sweep deliberately runs past decode capacity

    Fix:
        ignore:
          CAP001: the sweep deliberately runs past decode capacity
    """
    for key, reason in ctx.recipe.ignore.items():
        try:
            matching(key)
        except UnknownSelector as e:
            right = e.suggestion or "CODE"
            yield Violation(
                path=f"ignore.{key}",
                message=f"ignore: {e.describe()}",
                fix=f"ignore:\n  {right}: {reason}"
                if e.suggestion
                else "name a rule listed by `recipectl rules`, or drop the entry",
            )
