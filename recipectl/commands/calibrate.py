"""`recipectl calibrate RECIPE -o FILE`: measure a deployment at the few points that pin the
performance model (recipectl/plan/perf.py) and write the fitted coefficients, with what they
describe: the engine release, the device, the model, the effective configuration's fingerprint.

The points, each of a few requests (bench/probe.py): a prompt's time on the prefill endpoint alone
at three lengths (prefill); the same prompts through the router, streamed (TTFT, so the transfer,
and ITL at concurrency 1); two points at concurrency 4 (decode per request and per resident token).
A routed point the host disturbed is measured again (``disturbance``). Every point's
requests go into the file, and the model is fitted from them (``fit_calibration``).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..bench.probe import run_point
from ..effective import batch_limits, detect_host_cpu, resolve_role
from ..errors import ExitCode, RecipectlError
from ..fieldtypes import MAX_TOKENS
from ..fileio import JsonRefused, UnreadableFile, read_json_bounded, write_atomic
from ..models.spec import ModelSpec
from ..plan.perf import (
    ANALYTIC_DEVICES,
    DecodePoint,
    PerfModel,
    PrefillPoint,
    RoleShape,
    TransferCoeffs,
    TransferPoint,
    analytic_model,
    fit_decode,
    fit_prefill,
    fit_transfer,
    transfer_bytes,
    wave_prefill_steps,
)
from ..plan.recipe_plan import RolePlan, model_spec, plan_recipe, prompt_split, unknown_model_error
from ..schema import Recipe
from ..topology import place
from ..validate import load_variant
from .measuring import config_differences, deployment_to_measure, describe
from .outfile import cannot_write, check_can_create, check_out, files_read

# 2: prefill's overhead_s is per step (a hybrid prompt's split counted); a version 1 file fitted
# it per prompt, so its coefficients read under version 2 would count that overhead twice
CALIBRATION_VERSION = 2
MAX_CALIBRATION_BYTES = 4 << 20
# the warm-up before each point, in waves of the point's concurrency: one at a single user; two at
# four, where on the CPU engine the first measured wave after a one-wave warm-up still stalled
# (three of four first tokens at 2.2-2.5 s, against 0.5-1.3 s once the deployment had seen those
# concurrencies: the first calibration of docs/sla-planner.md's 2026-12-03e run, and its second)
WARMUP_WAVES = {1: 1, 4: 2}
# requests per single-user point, their median the measurement: five, so that two disturbed by
# something else on the host (a compile, a neighbour's burst) still leave the median undisturbed
REPEATS = 5
# the output of every routed point: 31 inter-token gaps a request, where 7 (an OSL of 8) left the
# CPU engine's single-user ITL anywhere in 12-22 ms from one request to the next
DECODE_OSL = 32
# requests per concurrency-4 point: five waves. A wave's requests decode together, so one
# disturbance moves all of them: of two waves' 8 ITLs one slow wave is half, and the median with it
# (on the CPU host 83 ms at 2.8 users where the held-out points measured 40-47 ms); of three waves'
# 12, two slow waves were the median (68 ms at 128 tokens, the third wave 42 ms, held-out points
# 33-43 ms: the 2026-12-03e run); of five, the median is the other three's
WAVE_REQUESTS = 20
# A routed point the host disturbed is measured again (which of the two is fitted: measure's
# steadily; the other stays in the file, set aside). Disturbed, at one user: its median TTFT this
# far above its fastest request's, some of its requests stalled (on the CPU host three of five first tokens at
# 0.38-0.77 s against 0.14 s: the transfer's latency fitted at 113 ms, every held-out TTFT
# predicted 14-76% long; docs/sla-planner.md, run k). At four users: its first and second halves
# (its requests in the order they finished) this far apart in median ITL, the host changed speed
# during it (halves 30 and 38 ms, requests 20-46 ms: decode's cost per resident token fitted at
# 10x the next calibration's, ITLs predicted 20-31% long on points that measured 17-23 ms: run j).
# The H200's points never came near either (at most 25% and 13%). At one user 30%: of the CPU
# host's 183 single-user points fitted before, 15 stood that far above their fastest request, and
# one of them at 43% (two of five first tokens at 180 and 323 ms against 85) had the link fitted at
# 3.3 MB/s and every held-out TTFT predicted 37-56% long (run d of "Prompts longer than a prefill
# step, on the CPU"); 50% had let it through.
STALLED_TTFT = 0.3
UNSTEADY_HALVES = 0.2
# a steady second measurement this much slower than the disturbed first is the host staying slow
STEADY_BUT_SLOWER = 0.1


def halves_apart(itls: list[float]) -> float:
    """How far apart the median ITLs of a point's first and second halves are, over the lower."""
    half = len(itls) // 2
    if half < 2:
        return 0.0
    a, b = statistics.median(itls[:half]), statistics.median(itls[half:])
    return abs(a - b) / min(a, b) if min(a, b) > 0 else 0.0


def point_itls(point: dict) -> list[float]:
    """A routed point's ITLs, less those of requests that streamed a single token (none)."""
    return [x for x in point["itl_s"] if x is not None]


def point_median(point: dict) -> float:
    """What a routed point is fitted by: its median TTFT at one user, its median ITL above."""
    xs = point["ttft_s"] if point["concurrency"] == 1 else point_itls(point)
    return statistics.median(xs) if xs else math.inf


def disturbance(point: dict) -> tuple[float, float, str]:
    """How disturbed a routed point's requests say the host was while it ran, the most a steady
    point shows, and what was measured."""
    if point["concurrency"] == 1:
        ttfts = point["ttft_s"]
        above = statistics.median(ttfts) / min(ttfts) - 1 if ttfts and min(ttfts) > 0 else 0.0
        return above, STALLED_TTFT, f"its median TTFT {above:.0%} above its fastest request's"
    apart = halves_apart(point_itls(point))
    return apart, UNSTEADY_HALVES, f"its halves' median ITLs {apart:.0%} apart"


# ----- reading a calibration (what one describes: describe(), commands/measuring.py) ---------
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
MAX_USERS = 1 << 16  # far past any point measure() takes


class CalibrationPoint(BaseModel):
    """A point as `measure` records it (`_raw`, and prefill's): what a calibration of an earlier
    version is fitted again from. Other keys are kept as they are."""

    kind: str
    isl: int = Field(ge=1, le=MAX_TOKENS)  # a wave's steps are worked out token by token's block
    osl: int = Field(ge=0, le=MAX_TOKENS)
    concurrency: int = Field(ge=1, le=MAX_USERS)
    seconds: list[Seconds] | None = None
    ttft_s: list[Seconds] | None = None
    itl_s: list[Seconds | None] | None = None  # None: a request that streamed a single token


class FitDecodePoint(BaseModel):
    """A decode point the model was fitted to (DecodePoint): users a decode endpoint held."""

    concurrency: float = Field(gt=0, le=MAX_USERS, allow_inf_nan=False)


class FitPoints(BaseModel):
    decode: list[FitDecodePoint] = []


class CalibrationFile(BaseModel):
    """What read_calibration reads of a calibration file, each number finite and in its range (a
    `.inf` users count had overflowed the planner): the model (a current version's), the points
    (an earlier version's, fitted again) and the points the model was fitted to. Other keys, the
    configuration it describes among them, are read as they are."""

    model_config = ConfigDict(extra="allow")

    model: PerfModel | None = None
    points: list[CalibrationPoint] | None = None
    fit_points: FitPoints | None = None

    @field_validator("model", mode="before")
    @classmethod
    def _measured(cls, value: object) -> object:
        return {**value, "calibrated": True} if isinstance(value, dict) else value


def _validated(data: dict, path: str, fix: str) -> CalibrationFile:
    """The file's numbers checked (CalibrationFile), or RecipectlError naming the file and the field."""
    try:
        return CalibrationFile.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "the file"
        raise RecipectlError(f"{path}: {field}: {first['msg'].lower()}", fix=fix) from None


def read_calibration(path: str, current: dict, shapes: tuple[RoleShape, RoleShape]) -> PerfModel:
    """A calibration file's model, refused (exit 2) unless it describes ``current`` (describe()):
    the message names the settings that differ. ``shapes``: the recipe's (prefill, decode) shapes.

    A calibration of an earlier version is fitted again from the points it recorded
    (``fit_calibration``, as the accuracy benchmark's --rescore does), not read: version 1's
    coefficients may come from a fit that took prefill's overhead per prompt, where this model
    counts it per step of a split prompt, and would count it twice. One of a later version
    (a newer recipectl's) is refused."""
    again = f"recipectl calibrate RECIPE -o {path} --force   (on this configuration)"
    fix = f"{again}, or plan without --calibration"
    try:
        data = read_json_bounded(path, MAX_CALIBRATION_BYTES)
    except UnreadableFile as e:
        raise RecipectlError(f"cannot read calibration {path}: {e.reason}", fix=fix) from None
    except JsonRefused as e:
        raise RecipectlError(f"{path}: not a calibration: {e}", fix=fix) from None
    version = data.get("calibration_version") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecipectlError(f"{path}: not a recipectl calibration (version {CALIBRATION_VERSION})", fix=fix)
    if version > CALIBRATION_VERSION:
        raise RecipectlError(
            f"{path}: a calibration of version {version}, written by a newer recipectl; this one reads "
            f"versions 1 to {CALIBRATION_VERSION}",
            fix=f"upgrade recipectl, or {again}",
        )
    if data.get("fingerprint") != current["fingerprint"]:
        theirs = data.get("configuration")
        shown = config_differences(
            theirs if isinstance(theirs, dict) else {}, current["configuration"], then="calibrated"
        )
        raise RecipectlError(
            f"{path} describes another configuration than this recipe on this host: {shown or 'fingerprints differ'}",
            fix=fix,
        )
    checked = _validated(data, path, fix)
    if version < CALIBRATION_VERSION:
        try:
            refitted = refit_on_layout(data, {"prefill": shapes[0], "decode": shapes[1]})
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as e:
            raise RecipectlError(
                f"{path}: a calibration of version {version}, fitted again from its points by this recipectl's "
                f"model, and they cannot be: {str(e)[:300] or type(e).__name__}",
                fix=fix,
            ) from None
        return refitted
    model = checked.model
    if model is None:
        raise RecipectlError(f"{path}: model: no model coefficients", fix=fix)
    if model.measured_users is None:  # written before calibrations said it: their decode points do
        users = [p.concurrency for p in checked.fit_points.decode] if checked.fit_points else []
        model = model.model_copy(update={"measured_users": math.ceil(max(users)) if users else None})
    return model


# ----- the model's inputs -----------------------------------------------------------------------
def role_shapes(recipe: Recipe, recipe_path: str) -> tuple[dict[str, RoleShape], dict[str, RolePlan], ModelSpec]:
    """Each role's RoleShape (recipectl/plan/perf.py) from the capacity planner, and the model spec:
    the bytes a request moves per rank, and the requests a decode endpoint's cache keeps resident; the
    capacity plans (plan_recipe) and the model spec too."""
    host = detect_host_cpu() if recipe.cluster.is_cpu else None
    plans = plan_recipe(recipe, Path(recipe_path).parent, host)
    if plans is None:
        raise RecipectlError(unknown_model_error(recipe), fix="model:\n  spec: Qwen3.5-35B-A3B   # a built-in model")
    spec = model_spec(recipe, Path(recipe_path).parent)
    assert spec is not None  # plan_recipe planned, so the model has a spec
    # prefill and decode on GPUs none of the other role's servers use: decode runs while prefill does
    both = {"prefill", "decode"}
    placement = place(recipe)
    own_gpus = not recipe.cluster.is_cpu and not any(
        {p.role for p in procs} >= both for procs in placement.shared_gpus.values()
    )
    own_cores = recipe.cluster.is_cpu and placement.roles_on_own_cores
    shapes = {}
    for role, rp in plans.items():
        p = rp.plan
        eff = resolve_role(recipe, role, host)
        limits = batch_limits(recipe, eff, p.max_model_len)
        cap = p.saturation_concurrency if p.saturation_concurrency is not None else int(p.max_concurrency) * p.dp
        shapes[role] = RoleShape(
            endpoints=rp.endpoints,
            gpus_per_endpoint=p.tp * p.dp,
            tp=p.tp,
            kv_bytes_per_token=p.kv_bytes_per_token,
            gdn_state_bytes_per_request=p.gdn_state_bytes_per_request,
            max_concurrency_per_endpoint=cap,
            tokens_per_step=limits.max_num_batched_tokens,
            split=prompt_split(recipe, eff, spec, p.block_size),
            own_gpus=own_gpus,
            own_cores=own_cores,
        )
    return shapes, plans, spec


def layout(p) -> str:
    """A role's parallel layout as recipes write it: TP4, DEP8, TP2 DP4."""
    if p.ep and p.tp == 1 and p.dp > 1:
        return f"DEP{p.dp}"
    return f"TP{p.tp}" + (f" {'DEP' if p.ep else 'DP'}{p.dp}" if p.dp > 1 else "")


def analytic_for(recipe, plans: dict, spec):
    """The uncalibrated model of the recipe's device, sized by decode's capacity plan."""

    d = plans["decode"].plan
    return analytic_model(
        recipe.cluster.gpu.value,
        active_params=spec.active_params or spec.active_param_estimate(),
        weight_bytes_per_gpu=d.weight_bytes_per_gpu,
        kv_bytes_per_token=d.kv_bytes_per_token,
        gdn_state_bytes_per_request=d.gdn_state_bytes_per_request,
        tp=d.tp,
    )


# ----- measuring ---------------------------------------------------------------------------------
# The longest calibration prompt on the CPU platform: a prefill there runs at tens of ms a token
# (docs/engine-cpu.md), and a point is a warm-up and REPEATS requests.
CPU_MAX_CALIBRATION_ISL = 512


def calibration_lengths(max_model_len: int, max_batched: int | None, osl: int, *, cpu: bool) -> list[int]:
    """Three prompt lengths, each four times the last, the longest half a prefill step (on the CPU
    platform, at most CPU_MAX_CALIBRATION_ISL)."""
    top = min(max_model_len - osl - 8, max_batched or max_model_len) // 2
    if cpu:
        top = min(top, CPU_MAX_CALIBRATION_ISL)
    if top < 64:
        raise RecipectlError(
            f"prompts of at most {top} tokens are too few to tell a prefill's cost per token from its overhead",
            fix="max_model_len and max_num_batched_tokens of 256 or more",
        )
    return [top // 16, top // 4, top]


def measure(
    router: str,
    prefill_url: str,
    model: str,
    *,
    vocab_size: int,
    lengths: list[int],
    prefill_shape: RoleShape,
    decode_shape: RoleShape,
    device: str,
    progress: Callable[[str], None],
) -> dict:
    """Every point, and the fit (``fit_calibration``), for the layout ``prefill_shape`` x
    ``decode_shape`` (the bytes a request moves, the endpoints the router spreads users over) on
    ``device`` (cluster.gpu: the link whose bandwidth stands where the points do not pin it)."""

    def point(url, isl, osl, c, n, stream=True, seed=0):
        # the warm-up at the point's own concurrency: on the CPU platform the first batch of a new
        # shape pays its kernels' set-up (seen: 1.7-3.6 s TTFTs at concurrency 4 after a warm-up
        # of one request, 0.3-0.4 s once warm), which is no cost of the configuration
        run_point(
            url,
            model,
            isl=isl,
            osl=osl,
            concurrency=c,
            num_requests=WARMUP_WAVES.get(c, 1) * c,
            vocab_size=vocab_size,
            seed=10_000 + seed,
            stream=stream,
        )
        r = run_point(
            url, model, isl=isl, osl=osl, concurrency=c, num_requests=n, vocab_size=vocab_size, seed=seed, stream=stream
        )
        if r.errors or not r.samples:
            raise RecipectlError(
                f"calibration point isl={isl} osl={osl} c={c} failed: {'; '.join(r.errors[:3])}",
                fix="recipectl doctor RECIPE   (is the deployment serving?)",
                exit_code=ExitCode.FINDINGS,
            )
        return r

    def steadily(what: str, isl: int, c: int, n: int, seed: int) -> list[dict]:
        """A routed point, measured again where the host disturbed it (``disturbance``). The second
        is fitted where it is steady, unless it is more than STEADY_BUT_SLOWER slower than the
        first (a host that slowed during the first and stayed slow gives a second as even as it is
        slow), and where both are disturbed, the one with the lower median (``point_median``): what
        disturbs this host slows requests. The measurement fitted comes last, the other before it,
        set aside; a fitted one still disturbed says so (``"disturbed"``), and calibrate warns."""
        kept = _raw("routed", point(router, isl, DECODE_OSL, c, n, seed=seed))
        first, limit, why = disturbance(kept)
        if first <= limit:
            return [kept]
        progress(f"{what}, again: {why}")
        again = _raw("routed", point(router, isl, DECODE_OSL, c, n, seed=seed + 1000))
        before, after = point_median(kept), point_median(again)
        steady_again = disturbance(again)[0] <= limit
        if after < before or (steady_again and after <= before * (1 + STEADY_BUT_SLOWER)):
            kept, again = again, kept
        left, _, why_left = disturbance(kept)
        if left > limit:
            kept = {**kept, "disturbed": why_left}
            progress(
                f"warning: {what}: the host disturbed it twice, or slowed and stayed slow; the one fitted has "
                f"{why_left}: calibrate again when the host is quieter"
            )
        return [{**again, "kind": "set_aside", "why": "measured again; the other measurement fitted"}, kept]

    raw: list[dict] = []
    for i, isl in enumerate(lengths):
        progress(f"prefill alone, {isl} tokens")
        r = point(prefill_url, isl, 1, 1, REPEATS, stream=False, seed=i)
        raw.append({"kind": "prefill", "isl": isl, "osl": 1, "concurrency": 1, "seconds": [s.e2e_s for s in r.samples]})
        progress(f"through the router, {isl} tokens")
        raw += steadily(f"through the router, {isl} tokens", isl, 1, REPEATS, seed=100 + i)
    for j, isl in enumerate((lengths[0], lengths[1])):
        progress(f"decode at concurrency 4, {isl} tokens")
        raw += steadily(f"decode at concurrency 4, {isl} tokens", isl, 4, WAVE_REQUESTS, seed=200 + j)
    fitted, fit_points = fit_calibration(raw, prefill_shape=prefill_shape, decode_shape=decode_shape, device=device)
    return {"model": fitted.model_dump(mode="json"), "points": raw, "fit_points": fit_points}


def fit_calibration(
    points: list[dict], *, prefill_shape: RoleShape, decode_shape: RoleShape, device: str
) -> tuple[PerfModel, dict]:
    """The model from a calibration's points as ``measure`` records them (and a calibration file
    keeps them): the one fit, so that a calibration written earlier can be fitted again by this
    release's model (benchmarks/sla_planner_accuracy.py --rescore). Each point's measurement is the
    median of its requests. Returns the model and the points each part was fitted to.

    Decode's points are taken at the concurrency ``predict`` gives a decode endpoint, the point's
    users over the decode endpoints, not at the requests measured decoding together
    (``decode_residents``): on the CPU engine four users' requests overlapped 2.4-3.8 at a time,
    and a fit at those counts put the cost of each request on fewer of them than the prediction
    at four then multiplied it by (ITL predicted long at four users, by 22-70%, in every CPU run of
    docs/sla-planner.md); on the H200 they were 3.97-3.99, and it makes no difference there."""
    prefill_pts, decode_pts, routed = [], [], []
    for p in points:
        if p["kind"] == "prefill":
            prefill_pts.append(
                PrefillPoint(
                    isl=p["isl"],
                    seconds=statistics.median(p["seconds"]),
                    steps=wave_prefill_steps(1, p["isl"], prefill_shape),
                )
            )
            continue
        if p["kind"] != "routed":  # a point measured again, and the measurement not fitted
            continue
        itls = point_itls(p)
        if not itls:
            continue
        per_endpoint = math.ceil(p["concurrency"] / decode_shape.endpoints)
        decode_pts.append(
            DecodePoint(concurrency=per_endpoint, context=p["isl"] + p["osl"] // 2, itl_s=statistics.median(itls))
        )
        if p["concurrency"] == 1:
            routed.append((p["isl"], statistics.median(p["ttft_s"])))
    prefill = fit_prefill(prefill_pts)
    decode = fit_decode(decode_pts)
    # the device's own link where the points do not pin the bandwidth: the CPU's 1 GB/s stood in
    # on two H200s over NVLink, where a request's 43-295 MB arrived in 11-21 ms whatever its size,
    # and put 43-295 ms on each (every TTFT predicted 2-3x long)
    dev = ANALYTIC_DEVICES.get(device, ANALYTIC_DEVICES["CPU"])
    transfer_pts = [
        TransferPoint(
            nbytes=transfer_bytes(prefill_shape, isl),
            seconds=ttft - prefill.time_s(isl, wave_prefill_steps(1, isl, prefill_shape)) - decode.itl_s(1, isl),
        )
        for isl, ttft in routed
    ]
    transfer = fit_transfer(
        transfer_pts, TransferCoeffs(latency_s=dev.link_latency_s, bytes_per_s=dev.link_bytes_per_s)
    )
    measured = max((math.ceil(p.concurrency) for p in decode_pts), default=None)
    fitted = PerfModel(prefill=prefill, decode=decode, transfer=transfer, calibrated=True, measured_users=measured)
    return fitted, {
        "prefill": [p.model_dump() for p in prefill_pts],
        "decode": [p.model_dump() for p in decode_pts],
        "transfer": [p.model_dump() for p in transfer_pts],
    }


def refit_on_layout(calibration: dict, shapes: dict[str, RoleShape], endpoints: dict | None = None) -> PerfModel:
    """The model a recorded calibration (a calibration file's or a benchmark run's: its ``points``
    and ``device``) fits to on the layout it measured: ``shapes``, a recipe's role shapes, with
    the endpoint counts the calibration recorded (``endpoints``; a calibration recorded before it
    said: the recipe's own). How a stored run is scored again by this release's model."""
    measured_on = {
        role: shape.model_copy(update={"endpoints": (endpoints or {}).get(role, shape.endpoints)})
        for role, shape in shapes.items()
    }
    model, _ = fit_calibration(
        calibration["points"],
        prefill_shape=measured_on["prefill"],
        decode_shape=measured_on["decode"],
        device=str(calibration.get("device")),
    )
    return model


def _raw(kind: str, r) -> dict:
    return {
        "kind": kind,
        "isl": r.isl,
        "osl": r.osl,
        "concurrency": r.concurrency,
        "decode_residents": r.decode_residents,
        "ttft_s": [s.ttft_s for s in r.samples],
        "itl_s": [s.itl_s for s in r.samples],
        "duration_s": r.duration_s,
        "output_tps": r.output_tps,
    }


# ----- the command -------------------------------------------------------------------------------
def calibrate(recipe_path: str, *, out: str, variant: str | None, attach: str | None, force: bool) -> int:
    """Launch (or, with ``attach``, use a running deployment of) the recipe, measure, stop what it
    launched, write ``out``."""
    from rich.console import Console

    loaded = load_variant(recipe_path, variant)
    recipe = loaded.recipe
    console = Console(stderr=True)
    # before anything is launched: the file is written minutes later, once everything is measured
    check_out(out, files_read(loaded, recipe_path), force=force, read_as="being calibrated", what="calibration")
    check_can_create(out, flag="-o", what="calibration")
    identity = describe(loaded, recipe_path)
    shapes, _, spec = role_shapes(recipe, recipe_path)
    eff_len, batched = _lengths_limits(recipe, spec)
    lengths = calibration_lengths(eff_len, batched, 32, cpu=recipe.cluster.is_cpu)
    try:
        with deployment_to_measure(
            recipe_path, loaded, attach, console, identity=identity, purpose="calibrate", same_endpoints=False
        ) as state:
            prefill_url = next(p.url for p in state.processes if p.kind == "prefill")
            # a run without a router is refused when attached; launch records both URLs
            assert state.router_url is not None and prefill_url is not None
            t0 = time.monotonic()

            def progress(what: str) -> None:
                console.print(f"[{time.monotonic() - t0:6.1f}s] {what}", highlight=False)

            result = measure(
                state.router_url,
                prefill_url,
                recipe.served_name,
                vocab_size=spec.vocab_size,
                lengths=lengths,
                prefill_shape=shapes["prefill"],
                decode_shape=shapes["decode"],
                device=recipe.cluster.gpu.value,
                progress=progress,
            )
    except KeyboardInterrupt:  # what was launched is stopped by then
        console.print("[yellow]interrupted[/]")
        return int(ExitCode.INTERRUPTED)
    doc = {
        "calibration_version": CALIBRATION_VERSION,
        **identity,
        "recipe": recipe.name,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        **result,
    }
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    try:
        write_atomic(out, text)
    except OSError as e:  # the disk filled up while it measured: minutes of measurements not lost
        error = cannot_write(out, e, flag="-o", what="calibration")
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as lost:  # stdout on the same full disk, or closed
            raise RecipectlError(
                f"{error.message}, nor on stdout: {(lost.strerror or type(lost).__name__).lower()}; the "
                "measurements are lost",
                fix=f"{error.fix}, and run it again",
            ) from None
        raise RecipectlError(
            f"{error.message}; the calibration is on stdout",
            fix=f"{error.fix} (or keep stdout: ... > calibration.json)",
        ) from None
    m = result["model"]
    console.print(
        f"[green]calibrated[/]: prefill {m['prefill']['overhead_s'] * 1e3:.1f} ms a step + "
        f"{m['prefill']['per_token_s'] * 1e6:.1f} us/token; decode step {m['decode']['step_s'] * 1e3:.1f} ms "
        f"+ {m['decode']['per_seq_s'] * 1e3:.2f} ms/request + {m['decode']['per_ctx_token_s'] * 1e6:.3f} "
        f"us/resident token; transfer {m['transfer']['latency_s'] * 1e3:.1f} ms + "
        f"{m['transfer']['bytes_per_s'] / 1e9:.2f} GB/s -> {out}",
        highlight=False,
    )
    return 0


def _lengths_limits(recipe, spec) -> tuple[int, int | None]:

    eff = resolve_role(recipe, "prefill")
    mml = eff.value("max_model_len") or spec.max_position_embeddings or 4096
    return mml, eff.value("max_num_batched_tokens")
