"""Recipes in the formats users already have, read into recipectl's recipe.

Three formats besides recipectl's own, each told apart by its content (never its file name), each
an importer in the registry (registry.py: its name, `sniff` and `read`), sniffed in this order:

- ``dynamo``: a Dynamo `DynamoGraphDeployment` manifest whose workers run `python3 -m dynamo.vllm`;
- ``srt-slurm``: an srt-slurm (`srtctl`) recipe, vLLM flags under `backend.vllm_config.{prefill,decode}`,
  nodes and workers under `resources`;
- ``vllm-serve``: plain `vllm serve ...` command lines (a shell script with one or both roles; a
  script with one role is paired with the file named like it with `prefill` and `decode` swapped).

Each importer gives (a) the recipe as plain data, (b) where each recipe field came from in the
original file (line and column), and (c) what it could not carry, with its original line.

This module is imported on every `recipectl validate`: `sniff` is a few regular expressions, and
an importer's reader is imported only for a file that needs it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .names import DYNAMO, NATIVE, SRT_SLURM, VLLM_SERVE
from .registry import IMPORTERS, Importer, NotImportable, known_formats, register

if TYPE_CHECKING:
    from .common import Imported

_NATIVE_RE = re.compile(r"^version:[ \t]*['\"]?1\b", re.M)
_DYNAMO_RE = re.compile(r"^kind:[ \t]*['\"]?DynamoGraphDeployment\b", re.M)
_SRT_BACKEND_RE = re.compile(r"^backend:[ \t]*$", re.M)
_SRT_RESOURCES_RE = re.compile(r"^resources:[ \t]*$", re.M)
_SRT_VLLM_RE = re.compile(r"^[ \t]+(vllm_config:|type:[ \t]*['\"]?vllm\b)", re.M)
_SRT_OTHER_RE = re.compile(r"^[ \t]+(sglang_config:|trtllm_config:|type:[ \t]*['\"]?(sglang|trtllm)\b)", re.M)
# a command line that starts a server: optional `exec`, `VAR=value` prefixes, then vllm serve or
# the OpenAI server module
_SERVE_RE = re.compile(
    r"^[ \t]*(?:exec[ \t]+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*[ \t]+)*"
    r"(?:\S*/)?(?:vllm[ \t]+serve\b|python3?[ \t]+-m[ \t]+vllm\.entrypoints\.openai\.api_server\b)",
    re.M,
)


def _looks_like_dynamo(text: str, file: str) -> bool:
    """A top-level `kind: DynamoGraphDeployment` (in any document of the file)."""
    return bool(_DYNAMO_RE.search(text))


def _looks_like_srt_slurm(text: str, file: str) -> bool:
    """Top-level `backend:` and `resources:` mappings, the backend vLLM's — or another engine's:
    its importer refuses that in one line."""
    return bool(
        _SRT_BACKEND_RE.search(text)
        and _SRT_RESOURCES_RE.search(text)
        and (_SRT_VLLM_RE.search(text) or _SRT_OTHER_RE.search(text))
    )


def _looks_like_command_lines(text: str, file: str) -> bool:
    """A line that starts a server: `vllm serve` or the OpenAI server module."""
    return bool(_SERVE_RE.search(text))


# In the order files are sniffed in: the first importer whose sniff says yes reads the file.
register(Importer(DYNAMO, _looks_like_dynamo, "recipectl.formats.dynamo:import_dynamo"))
register(Importer(SRT_SLURM, _looks_like_srt_slurm, "recipectl.formats.srt_slurm:import_srt_slurm"))
register(Importer(VLLM_SERVE, _looks_like_command_lines, "recipectl.formats.commandline:import_command_lines"))

FORMATS = tuple(IMPORTERS)


def is_native(text: str) -> bool:
    """Whether the text says it is a recipectl recipe (`version: 1` at the top level)."""
    return bool(_NATIVE_RE.search(text))


def sniff(text: str, file: str = "") -> str:
    """The format of a recipe file's text: NATIVE, or the name of the first importer whose sniff
    recognises it. Anything unrecognised is NATIVE, so that the schema explains what is wrong with it."""
    if is_native(text):
        return NATIVE
    return next((i.name for i in IMPORTERS.values() if i.sniff(text, file)), NATIVE)


def import_text(text: str, file: str, fmt: str | None = None) -> Imported:
    """Read `text` (from `file`) in format `fmt` (sniffed when None) into a recipe.

    Raises NotImportable when the file is in no format recipectl reads, or says something a
    recipectl recipe cannot hold at all (another KV connector, an SGLang backend)."""
    importer = IMPORTERS.get(fmt or sniff(text, file))
    if importer is None:
        raise NotImportable(f"{file}: not a format recipectl imports", fix="recipectl import reads: " + known_formats())
    return importer.read(text, file)
