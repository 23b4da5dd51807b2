"""Recipes in the formats users already have, read into recipectl's recipe.

Three formats besides recipectl's own, each told apart by its content (never its file name):

- ``srt-slurm``: an srt-slurm (`srtctl`) recipe, vLLM flags under `backend.vllm_config.{prefill,decode}`,
  nodes and workers under `resources`;
- ``dynamo``: a Dynamo `DynamoGraphDeployment` manifest whose workers run `python3 -m dynamo.vllm`;
- ``vllm-serve``: plain `vllm serve ...` command lines (a shell script with one or both roles; a
  script with one role is paired with the file named like it with `prefill` and `decode` swapped).

Each importer gives (a) the recipe as plain data, (b) where each recipe field came from in the
original file (line and column), and (c) what it could not carry, with its original line.

This module is imported on every `recipectl validate`: `sniff` is a few regular expressions, and
an importer is imported only for a file that needs it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .names import DYNAMO, NATIVE, SRT_SLURM, VLLM_SERVE  # noqa: F401 - the formats' names, here too

if TYPE_CHECKING:
    from .common import Imported

FORMATS = (SRT_SLURM, DYNAMO, VLLM_SERVE)

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
    re.M)


def sniff(text: str) -> str:
    """The format of a recipe file's text: NATIVE, or one of FORMATS. Anything unrecognised is
    NATIVE, so that the schema explains what is wrong with it."""
    if _NATIVE_RE.search(text):
        return NATIVE
    if _DYNAMO_RE.search(text):
        return DYNAMO
    if _SRT_BACKEND_RE.search(text) and _SRT_RESOURCES_RE.search(text) and (
            _SRT_VLLM_RE.search(text) or _SRT_OTHER_RE.search(text)):
        return SRT_SLURM  # another engine's backend too: its importer refuses it in one line
    if _SERVE_RE.search(text):
        return VLLM_SERVE
    return NATIVE


def import_text(text: str, file: str, fmt: str | None = None) -> Imported:
    """Read `text` (from `file`) in format `fmt` (sniffed when None) into a recipe.

    Raises NotImportable when the file is in no format recipectl reads, or says something a
    recipectl recipe cannot hold at all (another KV connector, an SGLang backend)."""
    from .common import NotImportable

    fmt = fmt or sniff(text)
    if fmt == SRT_SLURM:
        from .srt_slurm import import_srt_slurm

        return import_srt_slurm(text, file)
    if fmt == DYNAMO:
        from .dynamo import import_dynamo

        return import_dynamo(text, file)
    if fmt == VLLM_SERVE:
        from .commandline import import_command_lines

        return import_command_lines(text, file)
    raise NotImportable(f"{file}: not an srt-slurm recipe, a Dynamo DynamoGraphDeployment or `vllm serve` "
                        "command lines", fix="recipectl import reads: " + ", ".join(FORMATS))
