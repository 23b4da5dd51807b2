"""A `vllm bench serve` random-dataset workload as the planner sees it: the length ranges it draws
and the attention blocks a resident request holds on average."""

from __future__ import annotations

import math

GiB = 1 << 30
MiB = 1 << 20


# ----- workload --------------------------------------------------------------------------------
def random_dataset_ranges(
    isl: int, osl: int, range_ratio: float, num_special_tokens: int = 0
) -> tuple[tuple[int, int], tuple[int, int]]:
    """((input low, high), (output low, high)), both inclusive. Mirrors ``get_sampling_params``
    of ``vllm bench``'s random dataset: ``[floor(L(1-r)), ceil(L(1+r))]`` drawn uniformly with
    ``rng.integers(low, high + 1)``; the prompt loses the tokenizer's special tokens first and the
    output is at least 1; ``0 <= r < 1``."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    real_isl = max(0, isl - num_special_tokens)
    in_lo, in_hi = math.floor(real_isl * (1 - range_ratio)), math.ceil(real_isl * (1 + range_ratio))
    out_lo = max(math.floor(osl * (1 - range_ratio)), 1)
    out_hi = max(math.ceil(osl * (1 + range_ratio)), 1)
    return (in_lo, in_hi), (out_lo, out_hi)


def _sum_ceil_div(x: int, b: int) -> int:
    """sum_{s=1..x} ceil(s / b), closed form."""
    if x <= 0:
        return 0
    q, r = divmod(x, b)
    return b * q * (q + 1) // 2 + r * (q + 1)


def expected_resident_attention_blocks(
    input_range: tuple[int, int], output_range: tuple[int, int], block_size: int
) -> float:
    """Mean attention blocks (per attention group) held by a request resident on a decode.

    Every decode step weighs the same: a request with prompt i and output o stays o steps and
    holds i + t tokens at step t = 1..o (i, o uniform over their ranges). Long outputs stay
    longer, so the mean resident length is E[i] + E[o^2] / (2 E[o]), not E[i] + E[o] / 2; and
    rounding up to whole blocks adds about half a block. This is what a saturated decode's
    pool holds on average per request."""
    (i_lo, i_hi), (o_lo, o_hi) = input_range, output_range
    n_in = i_hi - i_lo + 1
    total = 0
    for t in range(1, o_hi + 1):
        weight = o_hi - max(t, o_lo) + 1  # outputs o in range with o >= t
        total += weight * (_sum_ceil_div(i_hi + t, block_size) - _sum_ceil_div(i_lo - 1 + t, block_size))
    steps = n_in * sum(range(o_lo, o_hi + 1))
    return total / steps
