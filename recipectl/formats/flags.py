"""A server's command line (`vllm serve`, `python3 -m dynamo.vllm`) read into recipe fields by
flag name, with vLLM's spellings and arities (recipectl.engine_flags)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..engine_flags import FLAGS, Arity, EngineFlag, parse_extra_args
from ..placeholders import has_reference
from .shellwords import Word

# the flags an importer turns into recipe fields (the others stay in extra_args as written)
_SPELLINGS: dict[str, EngineFlag] = {s: f for f in FLAGS if not f.extra_only for s in f.spellings}
# Flags recipectl derives from the placement it computes; the original's values are not carried.
DERIVED = {"data_parallel_size_local", "data_parallel_start_rank", "data_parallel_address", "headless", "host"}
# Model-level settings (one value for both roles in a recipectl recipe).
MODEL_FIELDS = {"dtype", "load_format", "trust_remote_code", "language_model_only"}
# Dynamo's own worker flags (dynamo.vllm): they choose the role, they are not vLLM's.
DYNAMO_ROLE_FLAGS = {"--is-prefill-worker": "prefill", "--is-decode-worker": "decode"}
# Dynamo's other worker options, from its own parsers: components/src/dynamo/vllm/backend_args.py
# (DynamoVllmArgGroup) and components/src/dynamo/common/configuration/groups/runtime_args.py
# (DynamoRuntimeArgGroup). vllm serve refuses them ("unrecognized arguments"), so none is carried.
# Their arities as Dynamo parses them: a switch (also --no-NAME) takes no word, `--connector` and
# `--output-modalities` several; `--dyn-structural-tag`'s value is optional (a next word that is
# not a flag is its value). `--enforce-eager`, which Dynamo's diffusion options define too, is vLLM's.
DYNAMO_FLAGS: dict[str, Arity] = {
    "--disaggregation-mode": Arity.VALUE,
    "--endpoint": Arity.VALUE,
    "--store-kv": Arity.VALUE,
    "--request-plane": Arity.VALUE,
    "--migration-limit": Arity.VALUE,
    "--dyn-tool-call-parser": Arity.VALUE,
    "--dyn-reasoning-parser": Arity.VALUE,
    "--namespace": Arity.VALUE,
    "--kv-state-endpoint": Arity.VALUE,
    "--discovery-backend": Arity.VALUE,
    "--response-plane": Arity.VALUE,
    "--event-plane": Arity.VALUE,
    "--dyn-default-thinking-mode": Arity.VALUE,
    "--dyn-structural-tag-scope": Arity.VALUE,
    "--dyn-structural-tag-schema": Arity.VALUE,
    "--dyn-structural-tag": Arity.VALUE,
    "--custom-jinja-template": Arity.VALUE,
    "--endpoint-types": Arity.VALUE,
    "--dump-config-to": Arity.VALUE,
    "--multimodal-embedding-cache-capacity-gb": Arity.VALUE,
    "--media-output-fs-url": Arity.VALUE,
    "--media-output-http-url": Arity.VALUE,
    "--health-check-payload": Arity.VALUE,
    "--engine-request-limit": Arity.VALUE,
    "--sleep-mode-level": Arity.VALUE,
    "--mm-prompt-template": Arity.VALUE,
    "--stage-configs-path": Arity.VALUE,
    "--video-output-dir": Arity.VALUE,
    "--default-video-fps": Arity.VALUE,
    "--layerwise-num-gpu-layers": Arity.VALUE,
    "--boundary-ratio": Arity.VALUE,
    "--flow-shift": Arity.VALUE,
    "--diffusion-cache-backend": Arity.VALUE,
    "--diffusion-cache-config": Arity.VALUE,
    "--ulysses-degree": Arity.VALUE,
    "--ring-degree": Arity.VALUE,
    "--cfg-parallel-size": Arity.VALUE,
    "--model-express-url": Arity.VALUE,
    "--connector": Arity.MANY,
    "--output-modalities": Arity.MANY,
    "--use-vllm-tokenizer": Arity.BOOL,
    "--route-to-encoder": Arity.BOOL,
    "--multimodal-encode-worker": Arity.BOOL,
    "--multimodal-worker": Arity.BOOL,
    "--multimodal-decode-worker": Arity.BOOL,
    "--enable-multimodal": Arity.BOOL,
    "--frontend-decoding": Arity.BOOL,
    "--omni": Arity.BOOL,
    "--enable-layerwise-offload": Arity.BOOL,
    "--vae-use-slicing": Arity.BOOL,
    "--vae-use-tiling": Arity.BOOL,
    "--enable-cache-dit-summary": Arity.BOOL,
    "--enable-cpu-offload": Arity.BOOL,
    "--fpm-trace": Arity.BOOL,
    "--exclude-tools-when-tool-choice-none": Arity.BOOL,
    "--dyn-enable-structural-tag": Arity.BOOL,
    "--multimodal-embedding-cache-publisher": Arity.BOOL,
    "--tcp-tls-insecure": Arity.BOOL,
    "--nats-tls-insecure": Arity.BOOL,
}


def substituted(w: Word) -> str:
    """Why a word holding a command substitution (`$(cat model.txt)`) is not carried."""
    return (
        f"{quoted(w.substitutions[0])} is a command substitution: recipectl does not run it, so the "
        "value is not imported (write the value it gives)"
    )


def quoted(command: str) -> str:
    """A command substitution as a message quotes it: in backquotes, unless it is in backquotes."""
    return command if command.startswith("`") else f"`{command}`"


def dynamo_arity(name: str) -> Arity | None:
    """How many words ``name`` (normalised) takes where it is one of dynamo.vllm's own options; None
    where it is not one."""
    if name in DYNAMO_FLAGS:
        return DYNAMO_FLAGS[name]
    negated = DYNAMO_FLAGS.get("--" + name[5:]) if name.startswith("--no-") else None
    return Arity.BOOL if negated is Arity.BOOL else None


def _normalise(name: str) -> str:
    """vLLM's parser takes `--max_num_seqs` for `--max-num-seqs`."""
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


@dataclass
class RoleFlags:
    """One role's command line, read: typed settings, extra args, and what decides the role."""

    settings: dict[str, tuple[Any, Word]] = field(default_factory=dict)  # field -> (value, flag word)
    extra: list[Word] = field(default_factory=list)
    model: tuple[str, Word] | None = None
    unread_model: Word | None = None  # the model is a command substitution, not run
    kv_config: tuple[dict, Word] | None = None
    role: tuple[str, Word] | None = None  # from Dynamo's role flags or the KV role
    problems: list[tuple[Word, str]] = field(default_factory=list)
    derived: list[Word] = field(default_factory=list)
    dropped: list[tuple[Word, str]] = field(default_factory=list)


def read_flags(words: list[Word], *, positional_model: bool) -> RoleFlags:
    """Read a server's arguments (after `vllm serve` or `python3 -m dynamo.vllm`) by flag name."""
    out = RoleFlags()
    i = 0
    while i < len(words):
        w = words[i]
        text = w.text
        if not text.startswith("-") or text == "-":
            model_here = positional_model and out.model is None and out.unread_model is None
            if w.substitutions:
                out.dropped.append((w, substituted(w)))
                out.unread_model = w if model_here else out.unread_model
            elif model_here:
                out.model = (text, w)
            elif has_reference(text):  # `"${EXTRA_ARGS[@]}"`: known when the script runs (IMP001 says so)
                out.extra.append(w)
            else:
                out.dropped.append((w, "a positional argument recipectl does not know"))
            i += 1
            continue
        name, eq, inline = text.partition("=")
        norm = _normalise(name)
        has_value = bool(eq) or (i + 1 < len(words) and not words[i + 1].text.startswith("-"))
        value_text = inline if eq else (words[i + 1].text if has_value else None)
        step = 1 if eq or not has_value else 2
        computed = next((x for x in words[i : i + step] if x.substitutions), None)
        if computed is not None:
            out.dropped.append((w, substituted(computed)))
            if norm == "--model":
                out.unread_model = computed
            i += step
            continue
        if norm == "--model":
            if value_text is not None:
                out.model = (value_text, w)
            i += step
            continue
        if norm in DYNAMO_ROLE_FLAGS:
            out.role = (DYNAMO_ROLE_FLAGS[norm], w)
            i += 1
            continue
        arity = dynamo_arity(norm)
        if arity is not None:
            if norm == "--disaggregation-mode" and value_text in ("prefill", "decode"):
                out.role = (value_text, w)
            elif norm != "--disaggregation-mode":
                out.dropped.append((w, f"{name} is a dynamo.vllm option, not vLLM's; recipectl starts vllm serve"))
            if arity is Arity.BOOL:
                step = 1  # an on/off switch: the next word is not its value
            elif arity is Arity.MANY and not eq:
                while i + step < len(words) and not words[i + step].text.startswith("-"):
                    step += 1
            i += step
            continue
        flag = _SPELLINGS.get(norm)
        if flag is not None and flag.arity not in (Arity.BOOL, Arity.FLAG) and has_reference(value_text):
            # `--port $PREFILL_PORT`: set at deploy time, carried as written for IMP001, never judged
            flag = None
        if flag is None:
            out.extra.append(w)
            if step == 2:
                out.extra.append(words[i + 1])
            i += step
            continue
        i += _read_known_flag(words, i, flag, inline=bool(eq), out=out)
    return out


def _read_known_flag(words: list[Word], i: int, flag: EngineFlag, *, inline: bool, out: RoleFlags) -> int:
    """Read the flag at words[i], one recipectl knows, with the engine_flags parser into `out`;
    how many words it took."""
    w = words[i]
    name = w.text.partition("=")[0]
    if flag.arity in (Arity.BOOL, Arity.FLAG):
        take = 1
    elif flag.arity is Arity.MANY:
        take = 1
        while not inline and i + take < len(words) and not words[i + take].text.startswith("-"):
            take += 1
    else:
        take = 1 if inline else 2
    computed = next((x for x in words[i : i + take] if x.substitutions), None)
    if computed is not None:  # one of several values (the first was seen by read_flags)
        out.dropped.append((w, substituted(computed)))
        return take
    found, problems = parse_extra_args([x.text for x in words[i : i + take]])
    for p in problems:
        out.problems.append((w, p.message))
    for setting in found:
        f = setting.flag.field
        if f in DERIVED:
            out.derived.append(w)
        elif f == "kv_transfer_config":
            if isinstance(setting.value, dict):
                out.kv_config = (setting.value, w)
            else:
                out.problems.append((w, f"{name} is not a JSON object"))
        else:
            out.settings[f] = (setting.value, w)
    return max(take, 1)
