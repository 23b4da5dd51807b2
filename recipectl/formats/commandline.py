"""Plain `vllm serve ...` command lines: a shell script (line continuations, `export VAR=value`,
`VAR=value vllm serve ...` prefixes, its variables expanded as the shell would: shellvars.py) with
both roles, or one role per script.

A command's role is its `--kv-transfer-config` `kv_role` (kv_producer: prefill, kv_consumer:
decode); with `kv_both` or none, the file name (`...prefill...` / `...decode...`), else the order
of the commands (the first prefill, the second decode). A script with one role is paired with the
script named like it with `prefill` and `decode` swapped, in the same directory.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..fileio import UnreadableFile, read_text_bounded
from ..yamlsource import MAX_FILE_BYTES
from .common import (
    GPUS_PER_NODE,
    Imported,
    NotImportable,
    Origin,
    apply_role,
    gpu_in_text,
    model_from_flags,
    nodes_needed,
    safe_name,
    set_gpu,
    set_role_env,
    unread_model,
)
from .flags import RoleFlags, read_flags, substituted
from .names import VLLM_SERVE
from .shellvars import Scope, expand_words, read_assignments
from .shellwords import Word, shell_words

# the engine's version where the script installs or runs a release: `pip install vllm==0.26.0`,
# `vllm/vllm-openai:v0.26.0`
_VERSION_IN_TEXT = re.compile(r"\bvllm==(\d+\.\d+\.\d+)\b|\bvllm/vllm-openai:v(\d+\.\d+\.\d+)\b")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_KV_ROLE = {"kv_producer": "prefill", "kv_consumer": "decode"}
_ROUTERS = ("vllm-router", "toy_proxy_server", "disagg_proxy", "proxy_server")


class _Server:
    """One server command: its flags, its environment and where it starts."""

    def __init__(self, file: str, flags: RoleFlags, env: dict[str, tuple[str, Word]], start: Word):
        self.file, self.flags, self.env, self.start = file, flags, env, start
        self.role: str | None = None
        self.role_origin: Origin | None = None


def _servers(text: str, file: str, imp: Imported) -> list[_Server]:
    scope = Scope(file=file)  # the script's variables as it runs (shellvars.py)
    out: list[_Server] = []
    for cmd in shell_words(text):
        words = list(cmd)
        if words and words[0].text == "exec":
            words = words[1:]
        if read_assignments(words, scope):  # `A=1`, `export A=1`, arrays: the scope, not a command
            continue
        words = expand_words(words, scope)
        prefix: dict[str, tuple[str, Word]] = {}
        while words and _ASSIGN.match(words[0].text):
            name, _, value = words[0].text.partition("=")
            prefix[name] = (value, words[0])
            words = words[1:]
        if not words:
            continue
        texts = [w.text for w in words]
        server_at = None
        for i, t in enumerate(texts):
            if t == "serve" and i >= 1 and texts[i - 1].rsplit("/", 1)[-1] == "vllm":
                server_at, positional = i + 1, True
                break
            if t == "vllm.entrypoints.openai.api_server" and i >= 1 and texts[i - 1] == "-m":
                server_at, positional = i + 1, False
                break
        if server_at is None:
            if any(r in t for t in texts[:3] for r in _ROUTERS):
                imp.drop(
                    Origin(file, words[0].line, words[0].col, words[0].text),
                    words[0].text,
                    "the router or proxy: recipectl renders its own router",
                )
            continue
        flags = read_flags(words[server_at:], positional_model=positional)
        out.append(_Server(file, flags, {**_exported(scope), **prefix}, words[0]))
    return out


def _exported(scope: Scope) -> dict[str, tuple[str, Word]]:
    """The environment a server started here inherits from the script: its exported variables (one
    whose value is known only when the script runs, as written)."""
    out: dict[str, tuple[str, Word]] = {}
    for name in sorted(scope.exported, key=lambda n: (scope.where[n].line, scope.where[n].col)):
        if name in scope.arrays:  # bash exports no array
            continue
        w = scope.where[name]
        value = scope.values.get(name)
        if value is None:  # as written; `NAME+=x` appends to a value the file does not hold
            written = w.text.partition("=")[2]
            value = f"${{{name}}}{written}" if w.text.startswith(name + "+=") else written
        out[name] = (value, w)
    return out


def _partner(file: str) -> Path | None:
    p = Path(file)
    name = p.name
    for a, b in (("prefill", "decode"), ("decode", "prefill")):
        if a in name:
            other = p.with_name(name.replace(a, b))
            if other.is_file():
                return other
    return None


def _assign_roles(servers: list[_Server]) -> None:
    for s in servers:
        kv = s.flags.kv_config
        if kv is not None and kv[0].get("kv_role") in _KV_ROLE:
            s.role = _KV_ROLE[kv[0]["kv_role"]]
            s.role_origin = Origin(s.file, kv[1].line, kv[1].col, kv[1].text, f"kv_role {kv[0]['kv_role']}")
    rest = [s for s in servers if s.role is None]
    for s in rest:
        name = Path(s.file).name.lower()
        hint = "prefill" if "prefill" in name else "decode" if "decode" in name else None
        if hint and len([x for x in servers if x.file == s.file]) == 1:
            s.role = hint
            s.role_origin = Origin(s.file, s.start.line, s.start.col, s.start.text, f"the file name says {hint}")
    rest = [s for s in servers if s.role is None]
    taken = {s.role for s in servers if s.role}
    free = [r for r in ("prefill", "decode") if r not in taken]
    for s, role in zip(rest, free, strict=False):
        s.role = role
        s.role_origin = Origin(
            s.file,
            s.start.line,
            s.start.col,
            s.start.text,
            f"the {'first' if role == 'prefill' else 'second'} server command: {role}",
        )


def import_command_lines(text: str, file: str) -> Imported:
    """vllm serve command lines: one script with both roles, or one per role."""
    imp = Imported(VLLM_SERVE, file, files=[file])
    servers = _servers(text, file, imp)
    texts = [text]
    if len(servers) == 1:
        partner = _partner(file)
        if partner is not None:
            try:  # bounded as the script itself was: a regular UTF-8 file of at most 1 MiB
                other = read_text_bounded(partner, MAX_FILE_BYTES)
            except UnreadableFile as e:
                raise NotImportable(
                    f"{partner}: cannot read the other role's script: {e.reason}",
                    fix=f"import {file} with both commands in it, or make {partner.name} a text "
                    "file of its server command",
                ) from None
            imp.files.append(str(partner))
            texts.append(other)
            servers += _servers(other, str(partner), imp)
    if not servers:
        raise NotImportable(f"{file}: no vllm serve command")
    _assign_roles(servers)
    by_role: dict[str, list[_Server]] = {}
    for s in servers:
        by_role.setdefault(s.role or "?", []).append(s)
    missing = [r for r in ("prefill", "decode") if r not in by_role]
    if missing:
        raise NotImportable(
            f"{file}: only {', '.join(sorted(r for r in by_role if r != '?'))} here; a P/D recipe needs "
            f"{' and '.join(missing)} too",
            fix="put both commands in one script, or name the other one like this one with prefill/decode "
            "swapped (e.g. qwen-prefill.sh and qwen-decode.sh)",
        )
    imp.set(("version",), 1)
    imp.set(
        ("name",),
        safe_name(Path(file).stem.replace("prefill", "pd").replace("decode", "pd")),
        Origin(file, 1, 1, "", "the file name"),
    )
    for role in ("prefill", "decode"):
        first, *more = by_role[role]
        apply_role(
            imp,
            role,
            first.flags,
            first.file,
            endpoint_origin=first.role_origin or Origin(first.file, first.start.line, first.start.col),
        )
        imp.set((role, "endpoints"), 1 + len(more), first.role_origin)
        for extra in more:
            imp.drop(
                Origin(extra.file, extra.start.line, extra.start.col, extra.start.text),
                f"another {role} server",
                f"counted as one more {role} endpoint; its flags are taken to be "
                f"the first one's (line {first.start.line})",
            )
        for name, (value, w) in first.env.items():
            o = Origin(first.file, w.line, w.col, w.text)
            if w.substitutions:
                imp.drop(o, w.text, substituted(w))
            elif name == "CUDA_VISIBLE_DEVICES":
                imp.drop(o, w.text, "recipectl assigns each endpoint its GPUs from the placement")
            else:
                set_role_env(imp, role, name, value, o)
        model_from_flags(imp, first.flags, first.file)
    if imp.get(("model", "path")) is None:
        unread = next((s for s in servers if s.flags.unread_model is not None), None)
        if unread is not None and unread.flags.unread_model is not None:
            raise unread_model(unread.file, unread.flags.unread_model)
        raise NotImportable(f"{file}: the server commands name no model")
    if imp.get(("kv_transfer", "connector")) is None:
        raise NotImportable(
            f"{file}: no --kv-transfer-config: these servers do not run P/D",
            fix='--kv-transfer-config \'{"kv_connector": "NixlConnector", "kv_role": ...}\'',
        )
    first = by_role["prefill"][0]
    imp.at(("engine",), Origin(first.file, first.start.line, first.start.col))
    _cluster_and_version(imp, texts, file)
    return imp


def _cluster_and_version(imp: Imported, texts: list[str], file: str) -> None:
    """The GPU type and the vLLM release the scripts name, and the nodes their servers need."""
    found = next((g for g in (gpu_in_text(t, f) for t, f in zip(texts, imp.files, strict=True)) if g), None)
    gpu, origin = set_gpu(imp, found, assumed=Origin(file, 1, 1), says="the command lines name")
    for t, f in zip(texts, imp.files, strict=True):
        m = _VERSION_IN_TEXT.search(t)
        if m:
            line = t.count("\n", 0, m.start()) + 1
            imp.set(
                ("engine", "vllm_version"),
                m.group(1) or m.group(2),
                Origin(
                    f,
                    line,
                    m.start() - (t.rfind("\n", 0, m.start()) + 1) + 1,
                    m.group(0),
                    "the release the script installs or runs",
                ),
            )
            break
    gpn = GPUS_PER_NODE.get(gpu, 8)
    imp.set(("cluster", "gpus_per_node"), gpn, Origin(origin.file, origin.line, origin.col, "", "the GPU type's"))
    imp.set(("cluster", "nodes"), nodes_needed(imp, gpn), Origin(file, 1, 1, "", "the servers' GPUs over nodes"))
