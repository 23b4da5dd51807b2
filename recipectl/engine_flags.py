"""The `vllm serve` flags recipectl knows by name: how each typed recipe field is spelled on the
command line, and how a role's `extra_args` are read back into the same fields.

One table serves both directions, so a flag written in `extra_args` means to the rules exactly
what the typed field means. Spellings, aliases and arities are those of vLLM's own parser
(`vllm/engine/arg_utils.py`); tests/test_engine_parser.py holds this table against the installed
engine's parser. Pure data and string handling: no engine import.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .fileio import JsonRefused, parse_json
from .placeholders import has_reference


class Arity(str, Enum):
    VALUE = "value"  # --x V or --x=V
    BOOL = "bool"  # argparse BooleanOptionalAction: --x / --no-x
    FLAG = "flag"  # store_true: --x
    MANY = "many"  # nargs='+': --x A [B ...]


_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def _tokens(text: str) -> int:
    """vLLM's `human_readable_int` (engine fact human-readable-token-counts): k/m/g/t are decimal
    (16k = 16,000, 25.6k = 25,600), K/M/G/T binary (16K = 16,384, no decimals), else a plain
    integer."""
    t = text.strip()
    match = _HUMAN_INT.fullmatch(t)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix]  # a decimal with a binary suffix: ValueError, as vLLM refuses it
    return int(t)


def _tokens_or_auto(text: str) -> int | None:
    """`human_readable_int_or_auto` (--max-model-len, engine fact max-model-len-auto): `auto` or -1
    is the model's own length, which recipectl reads as unset (None)."""
    t = text.strip()
    if t == "-1" or t.lower() == "auto":
        return None
    return _tokens(t)


class ValueRefused(ValueError):
    """A value the flag's type reads but vLLM refuses, with why."""


def _positive(convert: Callable[[str], int]) -> Callable[[str], int]:
    """``convert``, and a value below 1 refused: SchedulerConfig's max_num_seqs and
    max_num_batched_tokens are ``Field(ge=1)`` (every release), so vLLM reads -5 and stops."""

    def read(text: str) -> int:
        value = convert(text)
        if value < 1:
            raise ValueRefused("vLLM wants at least 1")
        return value

    return read


# vLLM's PerformanceMode (config/vllm.py, every release 0.17.1-0.33.0): argparse refuses others
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def read(text: str) -> str:
        if text not in choices:
            raise ValueRefused(f"one of {', '.join(choices)}")
        return text

    return read


FLAG_JSON_MAX_BYTES = 64 * 1024  # a JSON flag value (--speculative-config): a few hundred bytes


def flag_json(text: str) -> Any:
    """A JSON flag value (--kv-transfer-config, --speculative-config), bounded in size and nesting."""
    return parse_json(text, max_bytes=FLAG_JSON_MAX_BYTES)


@dataclass(frozen=True)
class EngineFlag:
    """One `vllm serve` flag and the recipe field it stands for."""

    field: str  # the role field it sets (parallel: tp/dp/expert_parallel; model: dtype ...)
    flag: str  # vLLM's primary spelling
    aliases: tuple[str, ...] = ()
    arity: Arity = Arity.VALUE
    convert: Callable[[str], Any] = str
    # a flag with no recipe field, read from extra_args (it moves what another setting defaults
    # to) and left there by the importers
    extra_only: bool = False
    # Flags recipectl writes itself from the recipe's structure (placement, ports, KV transfer):
    # one in extra_args contradicts what recipectl starts, checks and routes to.
    owned: bool = False

    @property
    def spellings(self) -> tuple[str, ...]:
        negative = ("--no-" + self.flag[2:],) if self.arity is Arity.BOOL else ()
        return (self.flag, *self.aliases, *negative)


FLAGS: tuple[EngineFlag, ...] = (
    # parallelism: recipectl places processes and GPUs from `parallel`
    EngineFlag("tp", "--tensor-parallel-size", ("-tp",), convert=int, owned=True),
    EngineFlag("dp", "--data-parallel-size", ("-dp",), convert=int, owned=True),
    EngineFlag("expert_parallel", "--enable-expert-parallel", ("-ep",), Arity.BOOL, owned=True),
    EngineFlag("data_parallel_size_local", "--data-parallel-size-local", ("-dpl",), convert=int, owned=True),
    EngineFlag("data_parallel_start_rank", "--data-parallel-start-rank", ("-dpr",), convert=int, owned=True),
    EngineFlag("data_parallel_address", "--data-parallel-address", ("-dpa",), owned=True),
    EngineFlag("data_parallel_rpc_port", "--data-parallel-rpc-port", ("-dpp",), convert=int, owned=True),
    EngineFlag("headless", "--headless", (), Arity.FLAG, owned=True),
    EngineFlag("host", "--host", owned=True),
    EngineFlag("port", "--port", convert=int, owned=True),
    EngineFlag("served_model_name", "--served-model-name", (), Arity.MANY, owned=True),
    EngineFlag("kv_transfer_config", "--kv-transfer-config", convert=flag_json, owned=True),
    # model
    EngineFlag("dtype", "--dtype"),
    EngineFlag("load_format", "--load-format"),
    EngineFlag("trust_remote_code", "--trust-remote-code", (), Arity.BOOL),
    EngineFlag("language_model_only", "--language-model-only", (), Arity.BOOL),
    EngineFlag("max_model_len", "--max-model-len", convert=_tokens_or_auto),
    # scheduling and cache
    EngineFlag("max_num_batched_tokens", "--max-num-batched-tokens", convert=_positive(_tokens)),
    EngineFlag("max_num_seqs", "--max-num-seqs", convert=_positive(int)),
    EngineFlag("enable_chunked_prefill", "--enable-chunked-prefill", (), Arity.BOOL, extra_only=True),
    EngineFlag("gpu_memory_utilization", "--gpu-memory-utilization", ("--device-memory-utilization",), convert=float),
    EngineFlag("async_scheduling", "--async-scheduling", (), Arity.BOOL),
    EngineFlag("mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype"),
    EngineFlag("mamba_cache_dtype", "--mamba-cache-dtype"),
    EngineFlag("kv_cache_dtype", "--kv-cache-dtype"),
    EngineFlag("block_size", "--block-size", convert=int),
    EngineFlag("attention_backend", "--attention-backend"),
    EngineFlag("gdn_prefill_backend", "--gdn-prefill-backend"),
    EngineFlag("stream_interval", "--stream-interval", convert=int),
    EngineFlag("api_server_count", "--api-server-count", ("-asc",), convert=int),
    EngineFlag("enable_prefix_caching", "--enable-prefix-caching", (), Arity.BOOL),
    EngineFlag("disable_hybrid_kv_cache_manager", "--disable-hybrid-kv-cache-manager", (), Arity.BOOL),
    EngineFlag("speculative_config", "--speculative-config", ("-sc",), convert=flag_json),
    EngineFlag("max_cudagraph_capture_size", "--max-cudagraph-capture-size", convert=int),
    EngineFlag("enforce_eager", "--enforce-eager", (), Arity.BOOL),
    EngineFlag("all2all_backend", "--all2all-backend"),
    EngineFlag("enable_eplb", "--enable-eplb", (), Arity.BOOL),
    # no recipe field (extra_only), like --enable-chunked-prefill: they move the batch defaults
    EngineFlag("performance_mode", "--performance-mode", convert=_one_of(PERFORMANCE_MODES), extra_only=True),
    EngineFlag("pipeline_parallel_size", "--pipeline-parallel-size", ("-pp",), convert=_positive(int), extra_only=True),
)

BY_FIELD: dict[str, EngineFlag] = {f.field: f for f in FLAGS}
_BY_SPELLING: dict[str, EngineFlag] = {s: f for f in FLAGS for s in f.spellings}


def flag_by_spelling(spelling: str) -> EngineFlag:
    """The table's flag written ``spelling`` (one of its spellings, as abbreviated_flags gives them)."""
    return _BY_SPELLING[spelling]


def flag_for(field: str) -> str:
    """The spelling recipectl renders for a field."""
    return BY_FIELD[field].flag


def _normalise(name: str) -> str:
    """vLLM's FlexibleArgumentParser accepts `--max_num_seqs` for `--max-num-seqs`."""
    if name.startswith("--"):
        return "--" + name[2:].replace("_", "-")
    return name


@dataclass(frozen=True)
class ArgSetting:
    """One known flag found in a role's extra_args."""

    flag: EngineFlag
    value: Any  # converted value (True/False for boolean flags)
    index: int  # position of the flag in extra_args (for the finding's line)
    text: str  # the flag as written, e.g. --no-async-scheduling


@dataclass(frozen=True)
class ArgProblem:
    """A known flag whose value cannot be read (the engine would refuse it)."""

    index: int
    message: str
    field: str = ""  # the field of the flag whose value it is


def parse_extra_args(args: Sequence[str]) -> tuple[list[ArgSetting], list[ArgProblem]]:
    """Read the known flags out of `extra_args`, in order (argparse: the last one wins).

    `--x=V` and `--x V` both work; a flag recipectl does not know is skipped with its value (the
    next word when it does not start with '-'), as the engine's parser would consume it. A flag
    whose value is set at deploy time (`$SEQS`) is not among them (scan_extra_args says which).
    """
    found, problems, _ = scan_extra_args(args)
    return found, problems


def scan_extra_args(args: Sequence[str]) -> tuple[list[ArgSetting], list[ArgProblem], dict[str, int]]:
    """parse_extra_args, and the known flags whose value is set at deploy time: field -> the index
    of its last such occurrence."""
    found: list[ArgSetting] = []
    problems: list[ArgProblem] = []
    deferred: dict[str, int] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("-") or word == "-":
            i += 1
            continue
        name, eq, inline = word.partition("=")
        flag = _BY_SPELLING.get(_normalise(name))
        if flag is None:
            takes_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
            i += 2 if takes_next else 1
            continue
        start = i
        if flag.arity in (Arity.BOOL, Arity.FLAG):
            value: Any = not _normalise(name).startswith("--no-")
            i += 1
            if eq:
                problems.append(ArgProblem(start, f"{name} takes no value (write {name} alone)", flag.field))
                continue
        elif flag.arity is Arity.MANY:
            values = [inline] if eq else []
            i += 1
            while not eq and i < len(args) and not args[i].startswith("-"):
                values.append(args[i])
                i += 1
            value = values
        else:
            if eq:
                raw = inline
                i += 1
            elif i + 1 < len(args):
                raw = args[i + 1]
                i += 2
            else:
                problems.append(ArgProblem(start, f"{name} needs a value", flag.field))
                break
            if has_reference(raw):  # set at deploy time (`$PORT`): not a value to judge here (IMP001)
                deferred[flag.field] = start
                continue
            try:
                value = flag.convert(raw)
            except (JsonRefused, ValueRefused) as e:
                problems.append(ArgProblem(start, f"{name} {_shown(raw)} is not a valid value: {e}", flag.field))
                continue
            except (ValueError, TypeError):
                problems.append(ArgProblem(start, f"{name} {_shown(raw)} is not a valid value", flag.field))
                continue
        found.append(ArgSetting(flag, value, start, name))
    return found, problems, deferred


def unknown_flags(args: Sequence[str]) -> list[str]:
    """The flags in ``args`` this table does not know, as written (`--foo` of `--foo=1`): what only
    the engine's own parser can judge (checks/environment.engine_parser_problems)."""
    return [
        name
        for word in args
        if word.startswith("-") and word != "-"
        for name in (word.partition("=")[0],)
        if _normalise(name) not in _BY_SPELLING
    ]


def abbreviated_flags(args: Sequence[str]) -> list[tuple[int, str, list[str]]]:
    """The words of ``args`` that are no flag's whole name but begin some of the table's: (index,
    the word as written, the flags it begins). vLLM's parser takes a unique prefix as the flag
    (argparse's allow_abbrev, which vLLM's FlexibleArgumentParser leaves on: rule ARG004),
    and refuses one that begins several; the table reads whole names only."""
    out = []
    for i, word in enumerate(args):
        if word == "--":  # argparse reads what follows as positional arguments, no flags
            break
        name = _normalise(word.partition("=")[0])
        if not name.startswith("--") or len(name) < 3 or name in _BY_SPELLING:
            continue
        begun = sorted({s for s in _BY_SPELLING if s.startswith("--") and s.startswith(name)})
        if begun:
            out.append((i, word.partition("=")[0], begun))
    return out


def abbreviation_problems(args: Sequence[str]) -> dict[int, tuple[str, EngineFlag, str]]:
    """The words of ``args`` that begin one flag of the table only (abbreviated_flags), whose value
    vLLM would refuse were they that flag written in full (no value, an empty one, another flag
    where the value goes, one its type does not read): index -> (the word, the flag, what is
    wrong). vLLM reads such a word as the flag (0.32.0 refused `--max-num-seq` alone: "argument
    --max-num-seqs: expected one argument"), so its value is judged as the flag's (rule ARG003)."""
    out = {}
    for index, word, begun in abbreviated_flags(args):
        if len(begun) != 1:
            continue  # several flags: an ambiguous option (rule ARG004)
        _, eq, inline = args[index].partition("=")
        written = list(args)
        written[index] = begun[0] + eq + inline
        _, problems, _ = scan_extra_args(written)
        for problem in problems:
            if problem.index == index:
                out[index] = (word, flag_by_spelling(begun[0]), problem.message)
    return out


def _shown(raw: str, limit: int = 60) -> str:
    """A value as a message quotes it: repr, cut to `limit` characters."""
    return repr(raw) if len(raw) <= limit else repr(raw[:limit]) + "..."
