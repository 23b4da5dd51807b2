"""A role's `extra_args` read by flag name: what they override, and what they must not set."""

from __future__ import annotations

from typing import Iterator

from ..diagnostics import Category, Severity
from ..engine_flags import (
    BY_FIELD,
    ArgSetting,
    Arity,
    EngineFlag,
    abbreviated_flags,
    abbreviation_problems,
    flag_by_spelling,
)
from .context import RuleContext
from .registry import Violation, rule

# Where the recipe says what an owned flag would say (recipectl renders the flag from it).
_OWNER_FIELD = {
    "tp": "parallel",
    "dp": "parallel",
    "expert_parallel": "parallel",
    "data_parallel_size_local": "parallel",
    "data_parallel_start_rank": "parallel",
    "data_parallel_address": "cluster.hosts",
    "data_parallel_rpc_port": "data_parallel_rpc_port",
    "headless": "parallel",
    "host": "cluster.hosts",
    "port": "port",
    "served_model_name": "model.served_name",
    "kv_transfer_config": "kv_transfer / kv_role",
}


@rule(
    code="ARG001",
    name="engine-args.given-twice",
    title="Engine flag given twice",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="any role whose extra_args repeat a typed field or themselves",
    source="argparse (the last occurrence wins); vLLM serve flags",
)
def given_twice(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no engine setting is given both as a recipe field and in the role's `extra_args`, or
    twice inside `extra_args`.

    Why:
    recipectl renders the fields first and `extra_args` after them; vLLM's parser keeps the
    last value, so the field is silently overridden and the recipe says one thing while the
    engine runs another. recipectl's rules follow the engine (the extra_args value), but a
    reader of the recipe does not.

    Example:
        decode:
          async_scheduling: true
          extra_args: [--no-async-scheduling]

    Fix:
        decode:
          async_scheduling: false
    """
    for role, eff in ctx.effective.items():
        for dup in eff.duplicates:
            # a value read as unset (--max-model-len auto: the model's own length) has no field
            # value to write; the field is left out instead
            fix = (
                f"# leave {dup.field_path} out (then: {_said(None, dup.arg)}) and drop {dup.arg.text} from "
                f"{role}.extra_args"
                if dup.arg.value is None
                else f"{role}:\n  {dup.field}: {_yaml(dup.arg.value)}  # and drop {dup.arg.text} from extra_args"
            )
            yield Violation(
                f"{role}.extra_args.{dup.arg.index}",
                f"{dup.arg.text} in {role}.extra_args overrides {dup.field_path} "
                f"({_said(dup.field_value, dup.arg)}); the engine runs with {_said(dup.arg.value, dup.arg)}",
                fix,
            )
        for arg in eff.repeated:
            once = (
                f"# {_as_written(arg)} once in {role}.extra_args (it has no recipe field)"
                if arg.flag.extra_only
                else f"{role}:\n  {arg.flag.field}: {_yaml(arg.value)}  # once, as a field"
            )
            yield Violation(
                f"{role}.extra_args.{arg.index}",
                f"{arg.text} appears more than once in {role}.extra_args; the last one wins",
                once,
            )


def _as_written(arg: ArgSetting) -> str:
    """The flag with its value as extra_args takes it (a boolean as --x or --no-x)."""
    if arg.flag.arity is Arity.BOOL:
        return arg.flag.flag if arg.value else "--no-" + arg.flag.flag[2:]
    return f"{arg.flag.flag} {_yaml(arg.value)}"


def _said(value: object, arg: ArgSetting) -> str:
    """A value as the finding's message gives it; unset (None: what `--max-model-len auto` reads as)
    in words."""
    if value is not None:
        return repr(value)
    return "the model's own length (auto)" if arg.flag.field == "max_model_len" else "its default (unset)"


def _yaml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@rule(
    code="ARG002",
    name="engine-args.owned-flag",
    title="Flag recipectl derives from the recipe, in extra_args",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="any role",
    source="recipectl render (placement, ports and KV transfer come from the recipe's structure)",
)
def owned_flag(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That a role's `extra_args` do not set what recipectl writes itself from the recipe's
    structure: the parallel layout (`--tensor-parallel-size`, `--data-parallel-*`,
    `--enable-expert-parallel`, `--headless`), `--host`, `--port`, `--served-model-name` and
    `--kv-transfer-config`.

    Why:
    recipectl places GPUs, ports and router URLs from these fields. An override in `extra_args`
    gives the engine a layout its `CUDA_VISIBLE_DEVICES` does not hold (it fails at start-up),
    or a port the router and the health checks never look at.

    Example:
        decode:
          extra_args: [--tensor-parallel-size, "4"]

    Fix:
        decode:
          parallel: TP4
    """
    for role, eff in ctx.effective.items():
        for arg in eff.owned:
            owner = _OWNER_FIELD.get(arg.flag.field, arg.flag.field)
            target = owner if "." in owner or " " in owner else f"{role}.{owner}"
            yield Violation(
                f"{role}.extra_args.{arg.index}",
                f"{arg.text} in {role}.extra_args contradicts what recipectl renders from {target}",
                f"# drop {arg.text} from {role}.extra_args and set {target} instead",
            )


@rule(
    code="ARG003",
    name="engine-args.bad-value",
    title="extra_args flag without a valid value",
    severity=Severity.ERROR,
    category=Category.CRASH,
    applies="any role",
    source="vLLM serve flags (arity and type per flag)",
)
def bad_value(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That every flag recipectl knows in a role's `extra_args` has the value vLLM expects: a
    number where it takes a number, no value for a boolean flag, a value at all; also where the
    flag is written as the beginning of its name (`--max-num-seq`, rule ARG004), which vLLM reads
    as the flag.

    Why:
    The engine's parser rejects the command line and the process exits at once, on every node.

    Example:
        prefill:
          extra_args: [--max-num-seqs, many]

    Fix:
        prefill:
          max_num_seqs: 256
    """
    for role, eff in ctx.effective.items():
        for problem in eff.problems:
            flag = BY_FIELD.get(problem.field)
            yield Violation(
                f"{role}.extra_args.{problem.index}",
                f"{role}.extra_args: {problem.message}",
                f"# give {flag.flag} a value vLLM takes in {role}.extra_args.{problem.index} (it has no recipe field)"
                if flag is not None and flag.extra_only
                else f"# drop it from {role}.extra_args.{problem.index} and set it as a recipe field instead",
            )
    for role, spec in ctx.recipe.roles.items():
        for index, (word, flag, message) in abbreviation_problems(spec.extra_args).items():
            yield Violation(
                f"{role}.extra_args.{index}",
                f"{role}.extra_args: {word} is the beginning of {flag.flag}, which vLLM reads it as: {message}",
                _abbreviation_fix(role, index, word, flag),
            )


def _abbreviation_fix(role: str, index: int, word: str, flag: EngineFlag) -> str:
    """The fix for a flag written as its beginning: the recipe's own place for what it sets."""
    if flag.owned:
        return (
            f"# set {_OWNER_FIELD.get(flag.field, flag.field)} in the recipe (recipectl writes {flag.flag} from it) "
            f"and drop {word} from {role}.extra_args"
        )
    if flag.extra_only:
        return f"# write {flag.flag} in full, with a value vLLM takes, in {role}.extra_args.{index}"
    return f"{role}:\n  {flag.field}: ...  # as a field, and drop {word} from extra_args"


@rule(
    code="ARG004",
    name="engine-args.abbreviated",
    title="extra_args flag written as the beginning of one",
    severity=Severity.WARNING,
    category=Category.OPERABILITY,
    applies="any role whose extra_args abbreviate a flag recipectl reads",
    source="argparse's allow_abbrev (on by default), which vLLM's FlexibleArgumentParser "
    "(vllm/utils/argparse_utils.py) leaves on in 0.17.1 and 0.33.0 (read in their code); vLLM 0.32.0's parser "
    "took --max-num-seq 8 as --max-num-seqs 8 and refused --max-num ('ambiguous option') (run)",
)
def abbreviated(ctx: RuleContext) -> Iterator[Violation]:
    """What it checks:
    That no flag in a role's `extra_args` is written as the beginning of a flag recipectl reads
    (`--max-num-seq` for `--max-num-seqs`).

    Why:
    vLLM's parser takes a beginning that only one of its flags has as that flag, so the server
    runs with it; recipectl reads flags by their whole names, so the rules judge the recipe
    without it (the budget, the sequences, the dtypes they check are not the ones that run). A
    beginning that several of vLLM's flags share is refused at start ("ambiguous option"), also
    where only one of the flags recipectl reads has it (`--kv-cache-dtyp`: vLLM has
    `--kv-cache-dtype-skip-layers` too); doctor and launch read the command with the engine's own
    parser and say which.

    Example:
        prefill:
          extra_args: [--max-num-seq, "8"]

    Fix:
        prefill:
          max_num_seqs: 8
    """
    for role, spec in ctx.recipe.roles.items():
        refused = abbreviation_problems(spec.extra_args)  # ARG003's: an error there, not said twice
        for index, word, begun in abbreviated_flags(spec.extra_args):
            if index in refused:
                continue
            if len(begun) == 1:
                flag = flag_by_spelling(begun[0])
                yield Violation(
                    f"{role}.extra_args.{index}",
                    f"{word} in {role}.extra_args is the beginning of {begun[0]}: vLLM takes it as that "
                    "flag where none of its other flags begins so, and refuses it at start where one does "
                    f"(--kv-cache-dtyp begins --kv-cache-dtype-skip-layers too); recipectl's rules, which "
                    "read whole names, do not see it either way",
                    _abbreviation_fix(role, index, word, flag),
                )
            else:
                yield Violation(
                    f"{role}.extra_args.{index}",
                    f"{word} in {role}.extra_args begins {', '.join(begun)}: vLLM refuses a beginning "
                    "several of its flags share, and the server exits at start",
                    f"# write the flag meant in full in {role}.extra_args.{index}",
                )
