"""What the importers share: the result type, a recipe builder that remembers where each value
came from, GPU and model facts read from names, and YAML with positions. Shell words are in
shellwords.py, the reading of server flags in flags.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from ..models.info import architecture_family
from ..placeholders import has_reference
from ..yamlsource import DuplicateKey, Refused, compose_documents
from .flags import MODEL_FIELDS, RoleFlags, quoted
from .registry import NotImportable, PathKey
from .shellwords import Word


def other_backend(backend: str, where: str) -> NotImportable:
    """One line for a deployment of another engine (SGLang, TensorRT-LLM): `where` is FILE:LINE."""
    return NotImportable(f"{where}: backend {backend}: recipectl checks vLLM deployments")


@dataclass(frozen=True)
class Origin:
    """Where a value stands in the original file."""

    file: str
    line: int
    col: int = 1
    text: str = ""  # the setting as the original writes it, e.g. `--no-async-scheduling`
    note: str = ""  # how the value follows from it, when not literally


@dataclass(frozen=True)
class Dropped:
    """A setting of the original that the recipe does not carry, and why."""

    file: str
    line: int | None
    what: str
    why: str


@dataclass
class Imported:
    """A recipe read from another format: plain data, where each value came from, what was left."""

    format: str
    file: str
    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[PathKey, Origin] = field(default_factory=dict)
    dropped: list[Dropped] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every original file read (a pair of scripts)

    # -- building
    def set(self, path: PathKey, value: Any, origin: Origin | None = None) -> None:
        node: dict[Any, Any] = self.data  # a path's parts are keys of the nested mappings it names
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
        if origin is not None:
            self.origins[tuple(path)] = origin

    def get(self, path: PathKey, default: Any = None) -> Any:
        node: Any = self.data
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def at(self, path: PathKey, origin: Origin) -> None:
        """Say where a section stands without setting a value (findings on absent fields point there)."""
        self.origins.setdefault(tuple(path), origin)

    def drop(self, origin: Origin | None, what: str, why: str) -> None:
        dropped = Dropped(origin.file if origin else self.file, origin.line if origin else None, what, why)
        if dropped not in self.dropped:  # a script's export, dropped for each role it reaches: said once
            self.dropped.append(dropped)

    # -- reading
    def positions(self) -> dict[PathKey, tuple[int, int]]:
        out = {path: (o.line, o.col) for path, o in self.origins.items()}
        out.setdefault((), (1, 1))
        return out

    def files_by_path(self) -> dict[PathKey, str]:
        return {path: o.file for path, o in self.origins.items() if o.file != self.file}


def origin_in(file: str, pos: dict[PathKey, tuple[int, int]]) -> Callable[..., Origin]:
    """`o(*path, text=, note=)`: the Origin of a YAML path of `file` (its document's start when the
    path has no position of its own)."""

    def o(*path: str | int, text: str = "", note: str = "") -> Origin:
        line, col = pos.get(tuple(path), pos[()])
        return Origin(file, line, col, text, note)

    return o


def set_role_env(imp: Imported, role: str, name: str, value: Any, origin: Origin) -> None:
    """One variable of a role's environment: the NIXL side-channel port is a recipe field of its own."""
    if name == "VLLM_NIXL_SIDE_CHANNEL_PORT" and str(value).isdigit():
        imp.set((role, "side_channel_port"), int(value), origin)
    else:
        imp.set((role, "env", name), as_env(value), origin)


def unread_model(file: str, w: Word) -> NotImportable:
    """No model, where a server command names it by a command substitution (`$(cat model.txt)`)."""
    return NotImportable(
        f"{file}:{w.line}:{w.col}: the model is {quoted(w.substitutions[0])}, a command substitution: recipectl "
        "does not run it, so it has no model to import",
        fix="write the model's name or path in its place",
    )


def model_from_flags(imp: Imported, flags: RoleFlags, file: str) -> None:
    """The model a server's command line names, unless the recipe has one already."""
    if flags.model and imp.get(("model", "path")) is None:
        path, w = flags.model
        origin = Origin(file, w.line, w.col, path)
        imp.set(("model", "path"), path, origin)
        model_facts(imp, path, origin)


def set_gpu(imp: Imported, found: tuple[str, Origin] | None, *, assumed: Origin, says: str) -> tuple[str, Origin]:
    """cluster.gpu from the GPU the original names (gpu_in_text), else H200, said to be assumed
    (`says`: who names none, e.g. "the manifest names"); the GPU and where it came from."""
    if found:
        gpu, note = gpu_type(found[0])
        origin = found[1]
        if note:
            imp.drop(origin, found[0], note)
    else:
        gpu, origin = "H200", Origin(assumed.file, assumed.line, assumed.col, "", "no GPU type named: H200 assumed")
        imp.drop(assumed, "cluster.gpu", f"{says} no GPU type: H200 assumed (set cluster.gpu)")
    imp.set(("cluster", "gpu"), gpu, origin)
    return gpu or "H200", origin


def nodes_needed(imp: Imported, gpus_per_node: int) -> int:
    """Whole nodes for every endpoint's TP x DP GPUs, both roles."""
    total = 0
    for role in ("prefill", "decode"):
        par = imp.get((role, "parallel"), {})
        total += par.get("tp", 1) * par.get("dp", 1) * imp.get((role, "endpoints"), 1)
    return max(1, -(-total // gpus_per_node))


_NAME_OK = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A recipe name from the original's (letters, digits, '.', '_' and '-')."""
    name = _NAME_OK.sub("-", text).strip("-._") or "imported"
    return name if name[0].isalnum() else "r" + name


GPU_TYPES = {"gb200": "GB200", "b200": "B200", "h200": "H200", "h100": "H100"}
# GPUs recipectl's schema has no entry for, planned as the nearest one it has
GPU_NEAREST = {"gb300": "GB200", "b300": "B200"}
GPUS_PER_NODE = {"GB200": 4, "B200": 8, "H200": 8, "H100": 8}
_GPU_IN_TEXT = re.compile(r"\b(GB300|GB200|B300|B200|H200|H100)\b", re.I)
# the last resort: hybrid families by checkpoint name, where no architecture is known
_HYBRID_NAME = re.compile(r"qwen3[._-]?(5|6|next)|granite-4\.\d+-h\b|jamba|nemotron-h\b|falcon-h1|bamba|zamba2", re.I)


def gpu_type(name: str) -> tuple[str | None, str]:
    """recipectl's GPU type for a name, and a note when it is only the nearest one."""
    key = name.strip().lower()
    if key in GPU_TYPES:
        return GPU_TYPES[key], ""
    if key in GPU_NEAREST:
        return GPU_NEAREST[key], f"recipectl has no {name}; planned as {GPU_NEAREST[key]}"
    return None, ""


def gpu_in_text(text: str, file: str) -> tuple[str, Origin] | None:
    """A GPU named in the file's text (comments say 'on 8 x H200'), with its line."""
    m = _GPU_IN_TEXT.search(text)
    if not m:
        return None
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return m.group(1).upper(), Origin(file, line, col, m.group(0), "the GPU the file names")


def is_hybrid_name(path: str) -> bool:
    return bool(_HYBRID_NAME.search(path.rsplit("/", 1)[-1]))


_QUANT_SUFFIX = re.compile(r"-(NVFP4|FP8)(?:-|$)", re.I)


def model_facts(imp: Imported, path: str, origin: Origin) -> None:
    """Whether the model is hybrid — from its architecture (a local config.json, a built-in spec, a
    published checkpoint's architecture), by its name only as the last resort — and what a -FP8 /
    -NVFP4 checkpoint name says about its quantization (the planner sizes the weights from it).
    When nothing says, the family is left unset and IMP002 says so."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    family, how = architecture_family(path, Path(origin.file).parent)
    if imp.get(("model", "family")) is not None or has_reference(path):
        pass  # stated, or set at deploy time (IMP001 says so)
    elif family == "hybrid":
        imp.set(
            ("model", "family"), "hybrid", Origin(origin.file, origin.line, origin.col, origin.text, f"hybrid by {how}")
        )
    elif family is None and is_hybrid_name(name):
        imp.set(
            ("model", "family"),
            "hybrid",
            Origin(
                origin.file,
                origin.line,
                origin.col,
                origin.text,
                "hybrid by its name only: no config.json or known architecture says so (set model.family if it is not)",
            ),
        )
    m = _QUANT_SUFFIX.search(name)
    if m and imp.get(("model", "quantization")) is None:
        imp.set(
            ("model", "quantization"),
            m.group(1).lower(),
            Origin(origin.file, origin.line, origin.col, origin.text, f"the checkpoint name says {m.group(1)}"),
        )


# --------------------------------------------------------------------------------- assembling
KV_FIELDS = {
    "kv_connector": "connector",
    "kv_buffer_device": "buffer_device",
    "kv_load_failure_policy": "load_failure_policy",
}
NIXL_CONNECTORS = ("NixlConnector", "NixlPullConnector", "NixlPushConnector")


def _origin(file: str, w: Word, note: str = "") -> Origin:
    return Origin(file, w.line, w.col, w.text, note)


def apply_role(imp: Imported, role: str, flags: RoleFlags, file: str, *, endpoint_origin: Origin) -> None:
    """Put one role's flags into the recipe: typed fields, model-level fields, KV transfer,
    extra_args (in order), and what cannot be carried."""
    imp.at((role,), endpoint_origin)
    for field_name, (value, w) in flags.settings.items():
        o = _origin(file, w)
        if field_name in ("tp", "dp", "expert_parallel"):
            imp.set((role, "parallel", field_name), value, o)
        elif field_name == "served_model_name":
            if value and imp.get(("model", "served_name")) is None:
                imp.set(("model", "served_name"), value[0], o)
        elif field_name == "port":
            imp.set((role, "port"), value, o)
        elif field_name in MODEL_FIELDS:
            current = imp.get(("model", field_name))
            if current is not None and current != value:
                imp.drop(
                    o,
                    f"{w.text} on {role}",
                    f"recipectl holds one {field_name} for both roles; the other role's {current!r} is kept",
                )
            elif value is not False:
                imp.set(("model", field_name), value, o)
        else:
            imp.set((role, field_name), value, o)
    extra = [x.text for x in flags.extra]
    if extra:
        imp.set((role, "extra_args"), extra, _origin(file, flags.extra[0]))
        for k, w in enumerate(flags.extra):
            imp.origins[(role, "extra_args", k)] = _origin(file, w)
    for w in flags.derived:
        imp.drop(_origin(file, w), w.text, "recipectl renders it from the placement it computes")
    for w, why in flags.dropped:
        imp.drop(_origin(file, w), w.text, why)
    for w, why in flags.problems:
        imp.drop(_origin(file, w), w.text, f"the engine would refuse it: {why}")
    if flags.kv_config is not None:
        apply_kv_config(imp, role, flags.kv_config[0], _origin(file, flags.kv_config[1]))


def apply_kv_config(imp: Imported, role: str, cfg: dict, o: Origin) -> None:
    """`--kv-transfer-config` JSON: the connector-wide settings go to kv_transfer (a conflict between
    the roles is reported), kv_role to the role."""
    for key, value in cfg.items():
        if key == "kv_role":
            imp.set((role, "kv_role"), value, o)
        elif key in KV_FIELDS:
            if key == "kv_connector" and value not in NIXL_CONNECTORS:
                raise NotImportable(
                    f"{o.file}:{o.line}: KV connector {value!r}: recipectl deploys NIXL connectors "
                    f"only ({', '.join(NIXL_CONNECTORS)})"
                )
            _set_shared(imp, ("kv_transfer", KV_FIELDS[key]), value, o, role)
        elif key == "kv_connector_extra_config" and isinstance(value, dict):
            for k, v in value.items():
                path = ("kv_transfer", "backends") if k == "backends" else ("kv_transfer", "extra_config", k)
                _set_shared(imp, path, v, o, role)
        else:
            imp.drop(
                o,
                f"kv_transfer_config.{key} on {role}",
                "recipectl writes the KV transfer config itself and has no field for it",
            )


def _set_shared(imp: Imported, path: PathKey, value: Any, o: Origin, role: str) -> None:
    current = imp.get(path)
    if current is not None and current != value:
        imp.drop(
            o,
            f"{'.'.join(map(str, path))}: {value!r} on {role}",
            f"recipectl holds one value for both roles; {current!r} from the other role is kept",
        )
        return
    imp.set(path, value, o)


def as_env(value: Any) -> str:
    """An environment value as the process sees it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------------------- YAML
def yaml_documents(text: str, file: str) -> list[tuple[Any, dict[PathKey, tuple[int, int]]]]:
    """Every document of a YAML stream with the (line, col) of each key and item; a syntax error
    is NotImportable with its position."""
    try:
        out = list(compose_documents(text))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise NotImportable(f"{file}{where}: YAML syntax error: {e.problem or e.context}") from None
    except DuplicateKey as e:
        raise NotImportable(f"{file}:{e.mark.line + 1}: duplicate key '{e.key}'") from None
    except Refused as e:
        where = f":{e.mark.line + 1}:{e.mark.column + 1}" if e.mark else ""
        raise NotImportable(f"{file}{where}: {e.message}", fix=e.fix) from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        raise NotImportable(f"{file}: YAML error: {type(e).__name__}") from None
    return out


def block_script(text: str, line: int, col: int) -> tuple[int, int] | None:
    """For a YAML block scalar (`|` or `>`) whose indicator stands at (line, col): the file line of
    its first content line and the content's indentation. None for any other scalar."""
    lines = text.splitlines()
    if not (0 < line <= len(lines)) or lines[line - 1][col - 1 : col] not in ("|", ">"):
        return None
    for k in range(line, len(lines)):
        if lines[k].strip():
            return k + 1, len(lines[k]) - len(lines[k].lstrip(" "))
    return None
