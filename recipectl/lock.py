"""A lock: what a recipe resolves to on a host, pinned, so that what runs is what was validated.

A recipe says little of what the engine will actually do: defaults move with releases, an `auto`
SSM dtype becomes float32 on one CPU and bfloat16 on another, and with it the hybrid block size that
prefill and decode must share ("Local block size 128 is not divisible by remote block size 256").
The lock records, per role, every effective setting with its origin, the page geometry, the engine
build, the model's config, the image and a hash of every rendered command. `check` resolves the
recipe again and names each field that moved, with why it matters; `diff` compares two locks (the
same recipe on two kinds of host, say).

The lock is JSON with sorted keys, one value a line: diff-friendly. Values that only describe
where the lock was made (`meta`) are shown but never drift.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .checks.environment import engine_versions
from .effective import HostCpu, resolve
from .engine_env import engine_venv
from .errors import RecipectlError
from .fileio import UnreadableFile, read_text_bounded, write_atomic
from .loader import LoadedRecipe
from .models.info import config_path
from .plan.recipe_plan import model_spec, role_pages, state_dtypes
from .render.processes import build_deployment
from .render.values import EnvRef, HomePath, NodeAddress, UrlOf, Value
from .secretscan import redact_argv, redact_env

LOCK_VERSION = 1
LOCK_SUFFIX = ".lock.json"
MAX_LOCK_BYTES = 4 << 20
ROLES = ("prefill", "decode")
LAYOUT_ENV = "VLLM_SSM_CONV_STATE_LAYOUT"


def lock_path(recipe_file: str | Path, variant: str | None = None) -> Path:
    """Where a recipe's lock lives: beside it, `NAME.lock.json` (`NAME.VARIANT.lock.json` for one
    variant of a matrix recipe)."""
    p = Path(recipe_file)
    stem = p.name[: -len(p.suffix)] if p.suffix in (".yaml", ".yml", ".sh", ".json") else p.name
    if variant:
        stem = f"{stem}.{re.sub(r'[^A-Za-z0-9._-]', '_', variant)}"
    return p.with_name(stem + LOCK_SUFFIX)


# ------------------------------------------------------------------------------------- building
def build_lock(
    loaded: LoadedRecipe,
    recipe_file: str | Path,
    *,
    host: HostCpu | None,
    venv: Path | None = None,
    packages: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The lock of one concrete recipe on a host. `host` is the resolver's platform input (the CPU
    kind whose `auto` dtypes the engine picks); `packages` the engine's installed versions (read
    from `venv`'s metadata when not given)."""
    recipe = loaded.recipe
    base_dir = Path(recipe_file).parent
    host_label = host.label if host else None
    effective = resolve(recipe, host)
    try:
        spec = model_spec(recipe, base_dir)
    except ValueError:
        spec = None
    roles: dict[str, Any] = {}
    for role in ROLES:
        eff = effective[role]
        settings = {
            field: {"value": s.on(host_label), "source": s.source.value} for field, s in sorted(eff.settings.items())
        }
        dtypes = state_dtypes(eff, spec, host_label)
        pages = role_pages(recipe, eff, spec, host_label)
        section = getattr(recipe, role)
        layout = section.env.get(LAYOUT_ENV, recipe.engine.env.get(LAYOUT_ENV))
        roles[role] = {
            "settings": settings,
            "pages": {
                "block_size": pages.block_size if pages else None,
                "attention_page_bytes": pages.attention_page_bytes if pages else None,
                "conv_state_bytes": pages.conv_bytes if pages else None,
                "ssm_state_bytes": pages.ssm_bytes if pages else None,
                "kv_cache_dtype": dtypes.kv,
                "conv_state_dtype": dtypes.conv,
                "ssm_state_dtype": dtypes.ssm,
                "conv_state_layout": layout,
            },
        }
    commit = None
    if packages is None:
        venv = venv or engine_venv(recipe.engine.venv)
        packages = engine_versions(venv) if venv.is_dir() else {}
        commit = _vllm_commit(venv)
    return {
        "lock_version": LOCK_VERSION,
        "meta": {
            "recipe_file": Path(recipe_file).name,
            "recipe_sha256": _file_sha256(Path(recipe_file)),
            "host_cpu": host_label,
        },
        "recipe": {"name": recipe.name, "variant": loaded.variant},
        "engine": {
            "declared_vllm_version": recipe.engine.vllm_version,
            "packages": dict(sorted(packages.items())),
            "vllm_commit": commit,
        },
        "model": {
            "path": recipe.model.path,
            "spec": spec.name if spec else None,
            "config_sha256": _model_config_sha256(recipe.model.path, base_dir),
        },
        "image": {"ref": recipe.engine.image, "digest": _image_digest(recipe.engine.image)},
        "roles": roles,
        "commands": _command_hashes(loaded),
    }


def _command_hashes(loaded: LoadedRecipe) -> dict[str, str]:
    """sha256 of each process's command and environment as rendered (host-independent: a node is
    `<node N>`, a home path `~/...`, a reference `${NAME}`; credentials redacted first)."""
    recipe = loaded.recipe
    out = {}
    for p in build_deployment(recipe).processes:
        argv = redact_argv([_word(a) for a in p.argv])
        env = redact_env({k: _word(v) for k, v in p.env})
        text = json.dumps({"argv": argv, "env": env, "host": p.host, "gpus": list(p.gpus)}, sort_keys=True)
        out[p.name] = hashlib.sha256(text.encode()).hexdigest()
    return dict(sorted(out.items()))


def _word(value: Value) -> str:
    if isinstance(value, EnvRef):
        return f"${{{value.name}}}"
    if isinstance(value, NodeAddress):
        return f"<node {value.node}>"
    if isinstance(value, UrlOf):
        return f"http://<node {value.node}>:{value.port}"
    if isinstance(value, HomePath):
        return f"~/{value.rest}"
    return value


_COMMIT = re.compile(r"""^__commit_id__ = commit_id = ['"]([0-9a-f]{7,40})['"]""", re.M)


def _vllm_commit(venv: Path) -> str | None:
    """The commit vLLM's build recorded (`vllm/_version.py`, written by its setuptools-scm build);
    None where the build did not record one (the CPU wheels on PyPI say None)."""
    for version_file in venv.glob("lib/python*/site-packages/vllm/_version.py"):
        try:
            m = _COMMIT.search(read_text_bounded(version_file, 64 << 10))
        except UnreadableFile:
            continue
        return m.group(1) if m else None
    return None


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_text_bounded(path).encode()).hexdigest()
    except UnreadableFile:
        return None


def _model_config_sha256(model_path: str, base_dir: Path) -> str | None:
    """A local model's config.json, hashed (a hub id has no local config: None)."""
    try:
        return hashlib.sha256(read_text_bounded(config_path(model_path, base_dir)).encode()).hexdigest()
    except (UnreadableFile, OSError):
        return None


def _image_digest(image: str | None) -> str | None:
    if image and "@sha256:" in image:
        return image.split("@", 1)[1]
    return None


def dumps(lock: Mapping[str, Any]) -> str:
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def write_lock(lock: Mapping[str, Any], path: Path) -> None:
    write_atomic(path, dumps(lock))


def read_lock(path: str | Path) -> dict[str, Any]:
    """A lock file, or RecipectlError (exit 2) for one that is missing, unreadable or not a lock."""
    try:
        data = json.loads(read_text_bounded(path, MAX_LOCK_BYTES))
    except UnreadableFile as e:
        fix = "recipectl lock RECIPE writes it" if e.missing else None
        raise RecipectlError(f"{path}: cannot read the lock: {e.reason}", fix=fix) from None
    except (ValueError, RecursionError) as e:
        raise RecipectlError(
            f"{path}: not a lock (not JSON: {str(e)[:120]})", fix="recipectl lock RECIPE writes it anew"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("lock_version") != LOCK_VERSION
        or not isinstance(data.get("roles"), dict)
    ):
        raise RecipectlError(
            f"{path}: not a recipectl lock of version {LOCK_VERSION}", fix="recipectl lock RECIPE writes it anew"
        )
    return data


# ------------------------------------------------------------------------------- comparing
@dataclass(frozen=True)
class Drift:
    """One field whose value in the lock is not what the recipe resolves to now."""

    field: str
    locked: Any
    current: Any
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "locked": self.locked, "current": self.current, "why": self.why}


_MISSING = "<absent>"


def flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, leaf value) of a lock, in key order."""
    if isinstance(data, dict):
        if not data and prefix:
            yield prefix, {}
        for k in sorted(data):
            yield from flatten(data[k], f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data


def compare(locked: Mapping[str, Any], current: Mapping[str, Any], *, include_meta: bool = False) -> list[Drift]:
    """Every leaf that differs between two locks, with why it matters."""
    a = dict(flatten(dict(locked)))
    b = dict(flatten(dict(current)))
    out = []
    for field in sorted(set(a) | set(b)):
        if not include_meta and field.startswith("meta."):
            continue
        va, vb = a.get(field, _MISSING), b.get(field, _MISSING)
        if va != vb:
            out.append(Drift(field, va, vb, why_it_matters(field, a, b)))
    return out


def why_it_matters(field: str, locked: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What a change of `field` does to the deployment (the block size it moves, ...)."""
    parts = field.split(".")
    if parts[0] == "roles" and len(parts) >= 4:
        role = parts[1]
        block = f"roles.{role}.pages.block_size"
        moved = (
            f"; {role}'s block size {locked.get(block)} -> {current.get(block)}"
            if locked.get(block) != current.get(block)
            else ""
        )
        leaf = parts[-1]
        if leaf == "block_size":
            return (
                "the hybrid block size: prefill and decode must agree, or decode refuses the remote "
                "blocks at the NIXL handshake"
            )
        if "dtype" in leaf:
            return f"the cache dtype sets the GDN/KV page, and the page the block size{moved}"
        if leaf == "conv_state_layout":
            return "GDN conv state crosses NIXL only in the DS layout on both roles"
        if leaf.endswith("_bytes"):
            return f"the page geometry the two roles exchange{moved}"
        if parts[2] == "settings":
            return f"{role} will run with another {parts[3]}{moved}"
    if parts[0] == "engine":
        return "defaults, fixes and flag choices follow the engine's release and build"
    if parts[0] == "model":
        return "the model's dimensions and dtypes set every page and capacity"
    if parts[0] == "commands":
        return "the rendered command differs from the one that was validated"
    if parts[0] == "image":
        return "another image runs another engine build"
    return "the deployment resolves differently"


# ------------------------------------------------------------------- against running servers
CACHE_CONFIG_INFO = "vllm:cache_config_info"  # vLLM's CacheConfig as a gauge's labels (v1/metrics/loggers.py)
# (label of vllm:cache_config_info, the lock's resolved value, the lock's value as the recipe set it)
_SERVER_FIELDS = (
    ("block_size", "pages.block_size", None),
    ("cache_dtype", "pages.kv_cache_dtype", "settings.kv_cache_dtype.value"),
    ("mamba_cache_dtype", "pages.conv_state_dtype", "settings.mamba_cache_dtype.value"),
    ("mamba_ssm_cache_dtype", "pages.ssm_state_dtype", "settings.mamba_ssm_cache_dtype.value"),
    ("enable_prefix_caching", "settings.enable_prefix_caching.value", None),
)


def cache_config_labels(metrics_text: str) -> dict[str, str] | None:
    """The labels of the first `vllm:cache_config_info` sample (one per engine; they agree)."""
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == CACHE_CONFIG_INFO:
                return dict(sample.labels)
    return None


def server_drift(lock: Mapping[str, Any], role: str, labels: Mapping[str, str], version: str | None) -> list[Drift]:
    """What a running server says of itself (its cache config and version) against the lock: the
    engine's word, not the recipe's. A dtype the server still calls `auto` is compared with what
    the recipe asked for; a resolved one with what the lock resolved."""
    flat = dict(flatten(dict(lock)))
    out = []
    for label, resolved, asked in _SERVER_FIELDS:
        if label not in labels:
            continue
        said = labels[label]
        locked = flat.get(f"roles.{role}.{asked if asked and said == 'auto' else resolved}")
        if locked is None:
            continue
        if str(locked).lower() != said.lower():
            out.append(Drift(f"{role}.{label}", locked, said, why_it_matters(f"roles.{role}.pages.{label}", {}, {})))
    want = flat.get("engine.packages.vllm") or flat.get("engine.declared_vllm_version")
    if version and want and str(want).split("+")[0] != version.split("+")[0]:
        out.append(Drift(f"{role}.version", want, version, why_it_matters("engine.packages.vllm", {}, {})))
    return out
