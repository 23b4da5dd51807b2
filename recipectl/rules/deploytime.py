"""What the recipe leaves to where it is deployed: values set by variables recipectl could not
resolve from the file, and a model whose architecture recipectl cannot tell."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..placeholders import references
from .context import RuleContext
from .registry import Violation, rule


@rule(
    code="IMP001",
    name="deploy-time.unresolved-value",
    title="A value set at deploy time",
    severity=Severity.INFO,
    category=Category.OPERABILITY,
    applies="any recipe with a `$X`, `${X}`, `${X:-default}` or `$(VAR)` the file does not resolve",
    source="POSIX shell parameter expansion; Kubernetes dependent environment variables ($(VAR)); "
    "envsubst (Dynamo's recipes render ${VLLM_IMAGE} before kubectl apply)",
)
def unresolved(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    Which values the recipe leaves to the place it is deployed: a variable of the launch script,
    the container or the shell that renders the manifest, which the file itself does not set.

    Why:
    recipectl judges the values a recipe states. A reference it cannot resolve is kept as written
    and said here, never skipped silently: the rules that need the value did not judge it. An
    unresolved model is a warning — every hybrid rule needs to know the model; anything else is
    information (an image placeholder rendered by envsubst is a placeholder, not an invalid image).
    An environment value such as `${VLLM_API_KEY}` is not reported: recipectl passes it on by
    reference, as written, on purpose (a credential never enters a recipe).

    Example:
        model: {path: "${MODEL_NAME}"}
        decode:
          extra_args: [--port, $DECODE_PORT]

    Fix:
        model:
          path: Qwen/Qwen3.5-397B-A17B-FP8
    """
    model = ctx.recipe.model
    refs = references(model.path)
    if refs:
        yield Violation(
            "model.path",
            f"`model.path` is set at deploy time (`{refs[0]}`): rules that need the model did not run",
            "model:\n  path: <the Hugging Face id or directory it names>",
            severity=Severity.WARNING,
        )
    image = ctx.recipe.engine.image
    if image and references(image):
        yield Violation(
            "engine.image",
            f"`engine.image` is set at deploy time (`{references(image)[0]}`): the vLLM version is not read from it",
            "engine:\n  vllm_version: <the release it runs>",
        )
    for role, spec in ctx.roles():
        args = spec.extra_args
        for k, arg in enumerate(args):
            refs = references(arg)
            if not refs:
                continue
            if "[@]" in refs[0] or "[*]" in refs[0]:
                what = f"`{arg}` is an array set when the script runs: the flags it holds were not read"
            elif k > 0 and args[k - 1].startswith("--") and "=" not in args[k - 1]:
                what = f"`{args[k - 1]} {arg}` is set at deploy time: its value was not checked"
            elif arg.startswith("--"):
                what = f"`{arg}` is set at deploy time: its value was not checked"
            else:
                what = f"`{arg}` is set at deploy time: recipectl did not read it"
            yield Violation(
                f"{role}.extra_args.{k}",
                f"{role}.extra_args: {what}",
                f"{role}:\n  extra_args: [...]  # the values the deployment passes",
            )


@rule(
    code="IMP002",
    name="deploy-time.model-family-unknown",
    title="Whether the model is hybrid is unknown",
    severity=Severity.INFO,
    category=Category.OPERABILITY,
    applies="a model with no model.family, no local config.json, no built-in spec and no known architecture",
    source="recipectl.models.info (config.json architectures and layer_types; built-in specs)",
)
def family_unknown(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That recipectl knows whether the model is hybrid: from `model.family`, the model directory's
    config.json (`architectures`, `layer_types`), a built-in spec or a published checkpoint's known
    architecture.

    Why:
    Every hybrid rule (the conv-state layout, the async-scheduling race, prefix caching, the SSM
    cache) runs only on a hybrid model. A model recipectl cannot place would pass them all without
    a word; this says that they did not run.

    Example:
        model: {path: my-org/my-hybrid-finetune}

    Fix:
        model:
          path: my-org/my-hybrid-finetune
          family: hybrid
    """
    model = ctx.recipe.model
    if model.family is None and not references(model.path):
        yield Violation(
            "model.path",
            f"recipectl cannot tell whether {model.path} is hybrid (no config.json, "
            "built-in spec or known architecture says): the hybrid rules did not run",
            "model:\n  family: hybrid  # or dense / moe",
        )
