#!/usr/bin/env python3
"""Check recipectl's count of a hybrid prompt's prefill steps against each vLLM release's own
``Scheduler._mamba_block_aligned_split``, the function that ends a prefill chunk where the GDN
state must be cached (engine facts hybrid-prefill-*; recipectl/plan/perf.py prompt_chunk).

    python scripts/check-prefill-split.py            # download what is missing, check, write the report
    python scripts/check-prefill-split.py --offline  # only what the wheel cache holds

For each release the method is taken from the wheel's vllm/v1/core/sched/scheduler.py (with the
checkpoint helpers it imports from vllm/v1/kv_cache_interface.py) and run as the release wrote it,
on a scheduler and requests that hold only the attributes it reads: block size, token budget,
no Eagle, no partial-hash hits, no shared prefix, the hash block equal to the block. With 0.33's
FlashInfer GDN prefill (the engine fact hybrid-prefill-no-split-flashinfer-gdn) the GDN group
declares a prefill checkpoint block with alignment 64 (gdn_attn.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT).

Both sides fill each step the same way: the prompts of a wave in order, each taking its chunk of
what is left of the step's budget (the scheduler's running-then-waiting order for prompts that
arrived together). What is compared is where each chunk ends, and so the steps a wave takes, on a
grid of block sizes, budgets, prompt lengths and wave sizes. A release that cannot make progress
on a cell (before 0.27, a block wider than the budget leaves nothing to schedule) is counted as
stalled and not compared: those releases refuse to start so (engine fact
mamba-align-block-within-budget; rule HYB008).

What this leaves unchecked, and recipectl/plan/perf.py does not model (the conditions held fixed):
speculative decoding on the prefill role (EAGLE, EAGLE3 and MTP end the last chunk a block earlier,
and 0.30+ reserve tokens before a prompt's end), `--long-prefill-token-threshold` (caps each
prompt's chunk before the split), and partial prefix-cache hits on a hash block smaller than the
block (0.33's `--prefix-match-unit`). Each is off by default; a recipe that turns one on gets step
counts that may be off by a step a prompt.

Writes docs/prefill-split-check.md; exits 1 where a release and recipectl count differently.
Wheels come from the cache scripts/verify-engine-facts.py keeps (and fills, without --offline).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recipectl.engine_facts import holds, parse_version  # noqa: E402
from recipectl.fileio import write_atomic  # noqa: E402
from recipectl.plan.perf import PromptSplit, RoleShape, fill_steps, wave_prefill_steps  # noqa: E402


def _verifier():
    """scripts/verify-engine-facts.py (its wheel cache), loaded once: its dataclasses look their
    module up in sys.modules, so a copy loaded already (by a test) is the one to use."""
    loaded = sys.modules.get("verify_engine_facts")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("verify_engine_facts", ROOT / "scripts" / "verify-engine-facts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verify_engine_facts"] = module
    spec.loader.exec_module(module)
    return module


verify = _verifier()

REPORT = ROOT / "docs" / "prefill-split-check.md"
RELEASES = tuple(
    f"0.{minor}.{patch}" for minor, patch in ((17, 1), *((m, 0) for m in range(18, 34)))
)  # every release the engine-fact table knows with the split (0.17.1 introduced it)
SCHEDULER = "vllm/v1/core/sched/scheduler.py"
KV_CACHE_INTERFACE = "vllm/v1/kv_cache_interface.py"
FLASHINFER_ALIGNMENT = 64


@dataclass(frozen=True)
class Grid:
    """Every combination of these is a cell: a wave of alike prompts at one endpoint."""

    name: str
    blocks: tuple[int, ...]
    budgets: tuple[int, ...]
    prompt_lengths: tuple[int, ...]
    waves: tuple[int, ...]

    def describe(self) -> str:
        p = self.prompt_lengths
        return (
            f"{self.name}: blocks of {', '.join(map(str, self.blocks))} tokens, budgets of "
            f"{', '.join(map(str, self.budgets))}, prompts of {p[0]}-{p[-1]} tokens ({len(p)} lengths), "
            f"waves of {', '.join(map(str, self.waves))} prompts"
        )


GRIDS = (
    # small: every third prompt length across three blocks, budgets below and above a block
    Grid("small", (64, 128, 192), (48, 64, 100, 128, 200, 256, 384, 1000), tuple(range(1, 520, 3)), (1, 2, 3, 5)),
    # a GPU's: hybrid blocks of a thousand tokens and more, on the 16-token grid (1056) and on
    # FlashInfer's 64-token one (1088, 2176), vLLM's GPU budgets, prompts around the block edges
    Grid(
        "GPU-sized",
        (1056, 1088, 2176),
        (2048, 8192, 16384),
        tuple(sorted({*range(500, 20001, 397), 1055, 1056, 1057, 1087, 1088, 1089, 2175, 2176, 2177, 4352})),
        (1, 2, 4, 8, 16),
    ),
)
EXAMPLES = 5


def _function_source(tree: ast.Module, text: str, name: str, cls: str | None = None) -> str | None:
    body = tree.body
    if cls is not None:
        owner = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if owner is None:
            return None
        body = owner.body
    node = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    segment = ast.get_source_segment(text, node) if node is not None else None
    return textwrap.dedent(segment) if segment else None


def release_split(files: Path):
    """The release's _mamba_block_aligned_split as a plain function of (scheduler, request,
    num_new_tokens), compiled from its own source; None where the release has none."""
    text = (files / SCHEDULER).read_text()
    method = _function_source(ast.parse(text), text, "_mamba_block_aligned_split", "Scheduler")
    if method is None:
        return None
    namespace: dict = {"Request": object, "cdiv": lambda a, b: -(-a // b)}
    kv = files / KV_CACHE_INTERFACE
    if kv.is_file():
        kv_text = kv.read_text()
        kv_tree = ast.parse(kv_text)
        for helper in ("get_mamba_prefill_checkpoint_position", "is_mamba_prefill_checkpoint_valid"):
            source = _function_source(kv_tree, kv_text, helper)
            if source is not None:
                exec(compile(source, str(kv), "exec"), namespace)
    exec(compile(method, str(files / SCHEDULER), "exec"), namespace)
    return namespace["_mamba_block_aligned_split"]


def release_steps(split, requests: int, isl: int, block: int, budget: int, flashinfer: bool) -> int | None:
    """The steps a wave takes with the release's own chunk function; None where it stalls."""
    scheduler = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=block),
        block_size=block,
        hash_block_size=block,
        use_eagle=False,
        use_eagle_block_drop=False,
        mamba_partial_cache_hit=False,  # partial-hash hits, as later releases name them
        mamba_fine_grained_prefix_cache=False,  # the same, as 0.30 names them
        max_num_scheduled_tokens=budget,
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
        mamba_has_prefill_checkpoint_blocks=flashinfer,
        mamba_prefill_checkpoint_alignment=FLASHINFER_ALIGNMENT if flashinfer else None,
        num_hash_lookahead_tokens=0,
        mamba_shared_prefix_checkpoint=False,
    )

    def chunk(done: int, left: int) -> int:
        request = SimpleNamespace(
            num_computed_tokens=done, num_prompt_tokens=isl, num_tokens=isl, shared_prefix_boundary=0
        )
        return split(scheduler, request, min(isl - done, left))

    return fill_steps(requests, isl, budget, chunk)


def recipectl_split(version: str, block: int, flashinfer: bool) -> PromptSplit:
    """The split recipe_plan.prompt_split builds for this release (the same engine facts)."""
    v = parse_version(version)
    return PromptSplit(
        block=block,
        whole_blocks=holds("hybrid-prefill-split-whole-blocks", v) is not False,
        cuts_aligned_to_end=holds("hybrid-prefill-cuts-aligned-to-prompt-end", v) is not False,
        last_chunk_whole=flashinfer and holds("hybrid-prefill-no-split-flashinfer-gdn", v) is not False,
        checkpoint_alignment=FLASHINFER_ALIGNMENT if flashinfer else 1,
    )


@dataclass
class Result:
    release: str
    flashinfer: bool
    wheel: str
    cells: int = 0
    same: int = 0
    stalled: int = 0
    differences: list[str] = field(default_factory=list)


def check(version: str, files: Path, wheel: str, flashinfer: bool) -> Result | None:
    split = release_split(files)
    if split is None:
        return None
    result = Result(version, flashinfer, wheel)
    for grid in GRIDS:
        _check_grid(grid, version, split, flashinfer, result)
    return result


def _check_grid(grid: Grid, version: str, split, flashinfer: bool, result: Result) -> None:
    for block in grid.blocks:
        prompt_split = recipectl_split(version, block, flashinfer)
        for budget in grid.budgets:
            shape = RoleShape(
                endpoints=1,
                gpus_per_endpoint=1,
                kv_bytes_per_token=0,
                gdn_state_bytes_per_request=0,
                tokens_per_step=budget,
                split=prompt_split,
            )
            for isl in grid.prompt_lengths:
                for requests in grid.waves:
                    result.cells += 1
                    theirs = release_steps(split, requests, isl, block, budget, flashinfer)
                    if theirs is None:
                        result.stalled += 1
                        continue
                    ours = wave_prefill_steps(requests, isl, shape)
                    if ours == theirs:
                        result.same += 1
                    else:
                        cell = f"block {block}, budget {budget}, {requests} x {isl} tokens"
                        result.differences.append(f"{cell}: vLLM {theirs}, recipectl {ours}")


def report(results: list[Result], missing: list[str]) -> str:
    lines = [
        "# A hybrid prompt's prefill steps, recipectl against each vLLM release's code",
        "",
        "Generated by `python scripts/check-prefill-split.py`; do not edit. Each release's own",
        "`Scheduler._mamba_block_aligned_split` (from its wheel) against `recipectl/plan/perf.py`",
        "`wave_prefill_steps`, on every combination of two grids:",
        "",
        *(f"- {grid.describe()}" for grid in GRIDS),
        "",
        "Held fixed, so neither checked nor modelled (each off by default): speculative decoding on the",
        "prefill role, `--long-prefill-token-threshold`, partial prefix-cache hits on a hash block smaller",
        "than the block (`--prefix-match-unit`); no Eagle, no shared prefix. The script's docstring says more.",
        "",
        "| release | GDN prefill | wheel | cells | same steps | stalled (not compared) | different |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.release} | {'FlashInfer' if r.flashinfer else 'Triton / CPU'} | `{r.wheel}` | {r.cells} | "
            f"{r.same} | {r.stalled} | {len(r.differences)} |"
        )
    if missing:
        lines += ["", "Not checked (no wheel, or no scheduler.py in it): " + ", ".join(missing) + "."]
    different = [r for r in results if r.differences]
    if different:
        lines += ["", "## Differences (first few per release)", ""]
        for r in different:
            lines += [f"- {r.release} ({'FlashInfer' if r.flashinfer else 'Triton / CPU'}):"]
            lines += [f"  - {d}" for d in r.differences[:EXAMPLES]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true", help="use only the wheel cache")
    args = parser.parse_args(argv)
    results: list[Result] = []
    missing: list[str] = []
    for version in RELEASES:
        wheel = verify.wheel_for("vllm", version, [SCHEDULER, KV_CACHE_INTERFACE], args.offline)
        files = wheel.dir / "files" if wheel is not None else None
        if wheel is None or files is None or not (files / SCHEDULER).is_file():
            missing.append(version)
            continue
        variants = [False, True] if holds("hybrid-prefill-no-split-flashinfer-gdn", parse_version(version)) else [False]
        for flashinfer in variants:
            print(f"[check-prefill-split] {version}{' flashinfer' if flashinfer else ''}", file=sys.stderr, flush=True)
            result = check(version, files, wheel.filename, flashinfer)
            if result is None:
                missing.append(version)
                break
            results.append(result)
    write_atomic(REPORT, report(results, missing))
    bad = [r for r in results if r.differences]
    print(
        f"[check-prefill-split] wrote {REPORT.relative_to(ROOT)}: {len(results) - len(bad)}/{len(results)} "
        f"release variants count as recipectl does" + (f"; not checked: {', '.join(missing)}" if missing else ""),
        file=sys.stderr,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
