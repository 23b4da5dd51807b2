"""`plan --sla`: the SLA a user states, and the configurations that meet it, ranked.

For each split of the GPU budget into prefill and decode endpoints, at each layout option's TP per
role (rank_layouts: the recipe's, and the others recipectl/commands/plan_sla.py allows), the highest
concurrency whose predicted TTFT and ITL meet the SLA (both grow with concurrency, so a bisection
finds it), capped by what decode's cache holds; then what stops one more user: the binding
constraint.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from .perf import PerfModel, Prediction, RoleShape, predict, wave_splits

SLA_FIX = "--sla ttft=2s,itl=50ms   (ttft and/or itl, each a number with s or ms)"
_UNITS = {"s": 1.0, "ms": 1e-3}
_TERM = re.compile(r"^(?P<key>[a-z_]+)=(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s)$")


class SlaError(ValueError):
    """An SLA that cannot be read; the message names the term, SLA_FIX the form."""


class Sla(BaseModel):
    model_config = ConfigDict(frozen=True)

    ttft_s: float | None = None
    itl_s: float | None = None

    def met_by(self, p: Prediction) -> bool:
        return (self.ttft_s is None or p.ttft_s <= self.ttft_s) and (self.itl_s is None or p.itl_s <= self.itl_s)

    def text(self) -> str:
        parts = [
            f"ttft={self.ttft_s * 1e3:g}ms" if self.ttft_s is not None else None,
            f"itl={self.itl_s * 1e3:g}ms" if self.itl_s is not None else None,
        ]
        return ",".join(p for p in parts if p)


def parse_sla(text: str) -> Sla:
    """``ttft=2s,itl=50ms``: comma-separated terms, each key once, a unit on every number, > 0."""
    values: dict[str, float] = {}
    terms = [t.strip() for t in text.strip().lower().split(",")]
    if not text.strip() or any(not t for t in terms):
        raise SlaError(f"{text!r} is not an SLA: an empty term")
    for term in terms:
        m = _TERM.match(term.replace(" ", ""))
        if not m:
            raise SlaError(f"{term!r} is not a term of an SLA: write key=NUMBER with a unit (s or ms)")
        key = m["key"]
        if key not in ("ttft", "itl"):
            raise SlaError(f"unknown SLA key {key!r}: the keys are ttft and itl")
        if f"{key}_s" in values:
            raise SlaError(f"{key} is given twice")
        seconds = float(m["num"]) * _UNITS[m["unit"]]
        if seconds <= 0:
            raise SlaError(f"{key} must be more than 0")
        values[f"{key}_s"] = seconds
    return Sla(**values)


class Candidate(BaseModel):
    """One configuration at the highest concurrency that meets the SLA (None: not even one user)."""

    model_config = ConfigDict(frozen=True)

    prefill_endpoints: int
    decode_endpoints: int
    prefill_tp: int
    decode_tp: int
    gpus: int
    concurrency: int | None
    prediction: Prediction | None  # at that concurrency (at 1 when none meets it)
    binding: str  # prefill compute | decode compute | KV capacity | transfer | queueing
    capacity: int | None  # the most requests the decode endpoints' caches keep resident
    # a role at another TP than the one the model's coefficients describe (perf.at_tp scaled them)
    extrapolated: bool = False


def binding_constraint(
    model: PerfModel,
    sla: Sla,
    prefill: RoleShape,
    decode: RoleShape,
    *,
    isl: int,
    osl: int,
    concurrency: int,
    capacity: int | None,
) -> str:
    """What stops ``concurrency + 1`` users: the cache (decode holds no more), the ITL target
    (decode compute), or the TTFT target, named by its largest part: prefill compute, queueing (for
    the other prompts of its wave at prefill), transfer (moving the state, and waiting for the link
    while the rest of its wave's move), or decode compute (decode's first step)."""
    if capacity is not None and concurrency >= capacity:
        return "KV capacity"
    nxt = predict(model, prefill, decode, isl=isl, osl=osl, concurrency=concurrency + 1)
    if sla.itl_s is not None and nxt.itl_s > sla.itl_s:
        return "decode compute"
    parts = {
        "prefill compute": nxt.prefill_s,
        "queueing": nxt.queue_s,
        "transfer": nxt.transfer_s + nxt.transfer_wait_s,
        "decode compute": nxt.first_step_s,
    }
    return max(parts, key=parts.__getitem__)


def best_concurrency(
    model: PerfModel, sla: Sla, prefill: RoleShape, decode: RoleShape, *, isl: int, osl: int, limit: int
) -> int | None:
    """The highest concurrency in [1, limit] whose prediction meets the SLA; None if 1 does not."""

    def ok(c: int) -> bool:
        return sla.met_by(predict(model, prefill, decode, isl=isl, osl=osl, concurrency=c))

    if not ok(1):
        return None
    best = _last(ok, 1, limit)
    if prefill.own_gpus and decode.own_gpus and best < limit and not wave_splits(prefill, isl, best):
        # On GPUs of each role's own the prediction drops where one more user splits a wave that
        # fit one prefill step (the users drift apart: perf._pipelined), and grows again past it:
        # the users past that drop are searched too.
        split = _last(lambda c: not wave_splits(prefill, isl, c), best, limit) + 1
        if split <= limit and ok(split):
            best = _last(ok, split, limit)
    return best


def _last(holds: Callable[[int], bool], lo: int, hi: int) -> int:
    """The last c in [lo, hi] for which ``holds`` is true, where it holds at lo and, once false,
    stays false (bisection)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def rank(
    model: PerfModel,
    sla: Sla,
    prefill: RoleShape,
    decode: RoleShape,
    *,
    isl: int,
    osl: int,
    gpus: int,
    max_concurrency: int = 1 << 16,
    laid_out: tuple[int, int] | None = None,
) -> list[Candidate]:
    """Every split of ``gpus`` into prefill and decode endpoints of the roles' shapes, each endpoint
    on GPUs of its own, best first: those meeting the SLA by TPS/GPU (then fewer GPUs), then those
    that do not. ``laid_out``: only that split of (prefill, decode) endpoints, on the ``gpus`` the
    recipe lays them on (servers sharing a GPU: its throughput is counted once)."""
    gp, gd = prefill.gpus_per_endpoint, decode.gpus_per_endpoint
    if laid_out is not None:
        splits = [laid_out]
    else:
        splits = [(p, d) for p in range(1, gpus // gp + 1) for d in range(1, (gpus - p * gp) // gd + 1)]
    out = []
    for p, d in splits:
        on = gpus if laid_out is not None else p * gp + d * gd
        pre = prefill.model_copy(update={"endpoints": p})
        dec = decode.model_copy(update={"endpoints": d})
        cap = d * decode.max_concurrency_per_endpoint if decode.max_concurrency_per_endpoint else None
        limit = min(cap, max_concurrency) if cap else max_concurrency
        c = best_concurrency(model, sla, pre, dec, isl=isl, osl=osl, limit=limit) if limit >= 1 else None
        at = predict(model, pre, dec, isl=isl, osl=osl, concurrency=c or 1)
        if on != p * gp + d * gd:
            at = at.model_copy(update={"tps_per_gpu": at.total_tps / on})
        binding = binding_constraint(model, sla, pre, dec, isl=isl, osl=osl, concurrency=c or 0, capacity=cap)
        out.append(
            Candidate(
                prefill_endpoints=p,
                decode_endpoints=d,
                prefill_tp=prefill.tp,
                decode_tp=decode.tp,
                gpus=on,
                concurrency=c,
                prediction=at,
                binding=binding,
                capacity=cap,
            )
        )
    return sorted(out, key=_best_first)


def _best_first(k: Candidate) -> tuple:
    """Those meeting the SLA first, by TPS/GPU, then fewer GPUs, fewer prefill endpoints, lower TP."""
    return (
        k.concurrency is None,
        -(k.prediction.tps_per_gpu if k.concurrency and k.prediction else 0),
        k.gpus,
        k.prefill_endpoints,
        k.prefill_tp + k.decode_tp,
    )


class LayoutOption(BaseModel):
    """One TP per role to rank: its shapes (the capacity planner's at that TP) and the model moved
    to it (perf.at_tp); ``extrapolated`` where a TP is not the one the model describes."""

    model_config = ConfigDict(frozen=True)

    prefill: RoleShape
    decode: RoleShape
    model: PerfModel
    extrapolated: bool


def rank_layouts(
    options: list[LayoutOption],
    sla: Sla,
    *,
    isl: int,
    osl: int,
    gpus: int,
    max_concurrency: int = 1 << 16,
    laid_out: tuple[int, int] | None = None,
) -> list[Candidate]:
    """rank() over every layout option, the candidates of all of them in one order, best first."""
    out: list[Candidate] = []
    for o in options:
        ranked = rank(
            o.model,
            sla,
            o.prefill,
            o.decode,
            isl=isl,
            osl=osl,
            gpus=gpus,
            max_concurrency=max_concurrency,
            laid_out=laid_out,
        )
        out += [c.model_copy(update={"extrapolated": o.extrapolated}) for c in ranked]
    return sorted(out, key=_best_first)


def curve(
    model: PerfModel,
    sla: Sla,
    prefill: RoleShape,
    decode: RoleShape,
    *,
    isl: int,
    osl: int,
    upto: int,
    also: int | None = None,
    devices: int | None = None,
) -> list[dict]:
    """Predictions from 1 user to ``upto`` at powers of two (and ``upto`` and ``also`` themselves:
    the configuration's best concurrency lies on its line): what the picture draws of one
    configuration, each point with whether it meets the SLA; throughput per device over
    ``devices`` where given (servers sharing GPUs), else over the endpoints' own GPUs."""
    upto = max(1, upto)
    levels = sorted({*(1 << k for k in range(upto.bit_length())), upto, *([also] if also else [])})
    out = []
    for c in levels:
        p = predict(model, prefill, decode, isl=isl, osl=osl, concurrency=c)
        out.append(
            {
                "concurrency": c,
                "tps_per_gpu": p.total_tps / devices if devices else p.tps_per_gpu,
                "tps_per_user": p.tps_per_user,
                "meets_sla": sla.met_by(p),
            }
        )
    return out
