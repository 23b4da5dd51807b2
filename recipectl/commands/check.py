"""`recipectl plan RECIPE --sla ... --check [--run RUN]`: predict, then measure. The plan's prediction
for the recipe's own configuration (its endpoints and layouts as written) at one point, that point
measured on the deployment (launched for it and stopped after, or a running one), predicted against
measured with the error, whether the measurement meets the SLA, and a line in the plan ledger.

`recipectl plan RECIPE --ledger`: the ledger's points for the recipe, predicted against measured,
and the median |error| per metric and model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..bench.probe import OUT_OF_STEP_REQUESTS_PER_USER, PointResult, SteadyState, run_point, warm_up
from ..errors import ExitCode, RecipectlError
from ..fileio import UnreadableFile
from ..loader import LoadedRecipe
from ..plan.ledger import METRICS, UNCALIBRATED, LedgerEntry, Metrics, Point, errors, median_abs_errors, read_entries
from ..plan.sla import SLA_FIX, Sla, SlaError, best_concurrency, parse_sla
from ..validate import load_variant
from . import json_errors_of
from .bench import print_fitted
from .ledger import RecipePredictor, ledger_file, predicted_metrics, recipe_predictor, record
from .measuring import deployment_to_measure
from .tables import Col, num

WARMUP_SEED = 10_000  # the warm-up's prompt is not one of the point's (no prefix cache hit)
MIN_REQUESTS = 3
MAX_CONCURRENCY = 1 << 16  # the bisection's bound where decode's cache sets none


@json_errors_of
def plan_extras(
    recipe_path: str,
    *,
    variant: str | None,
    as_json: bool,
    sla: str | None,
    calibration: str | None,
    gpus: int | None,
    isl: int | None,
    osl: int | None,
    check: bool,
    run: str | None,
    concurrency: int | None,
    ledger: bool,
    out_of_step: bool = False,
) -> int | None:
    """`plan --check` and `plan --ledger`; None when neither is asked for (plan's other forms)."""
    if not (check or ledger or run is not None or concurrency is not None or out_of_step):
        return None
    if ledger:
        others = [
            name
            for name, given in (
                ("--sla", sla),
                ("--calibration", calibration),
                ("--gpus", gpus),
                ("--isl", isl),
                ("--osl", osl),
                ("--check", check),
                ("--run", run),
                ("--concurrency", concurrency),
                ("--out-of-step", out_of_step),
            )
            if given
        ]
        if others:
            raise RecipectlError(
                f"--ledger prints what was measured; {', '.join(others)} "
                f"{'does' if len(others) == 1 else 'do'} not go with it",
                fix=f"recipectl plan {recipe_path} --ledger",
            )
        return print_ledger(load_variant(recipe_path, variant), recipe_path, as_json=as_json)
    if not check:
        raise RecipectlError(
            "--run, --concurrency and --out-of-step go with --check",
            fix=f"recipectl plan {recipe_path} --sla ttft=2s --check",
        )
    if sla is None:
        raise RecipectlError(
            "--check measures whether the recipe meets an SLA: it needs --sla",
            fix=f"recipectl plan {recipe_path} --sla ttft=2s,itl=50ms --check",
        )
    if gpus is not None:
        raise RecipectlError(
            "--check measures the recipe's own configuration: --gpus does not go with it",
            fix="set the endpoints in the recipe, or plan --sla ... --gpus N without --check",
        )
    loaded = load_variant(recipe_path, variant)
    report = check_report(
        loaded,
        recipe_path,
        sla_text=sla,
        calibration=calibration,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        attach=run,
        as_json=as_json,
        out_of_step=out_of_step,
    )
    if report is None:
        return int(ExitCode.INTERRUPTED)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        print_check(report)
    return 0 if report["meets_sla"] else 1


# ----- choosing the point -----------------------------------------------------------------------
def read_sla(text: str) -> Sla:
    try:
        return parse_sla(text)
    except SlaError as e:
        raise RecipectlError(f"--sla: {e}", fix=SLA_FIX) from None


def point_lengths(loaded: LoadedRecipe, recipe_path: str, isl: int | None, osl: int | None) -> tuple[int, int]:
    w = loaded.recipe.workload
    isl, osl = isl or (w.isl if w else None), osl or (w.osl if w else None)
    if not isl or not osl:
        raise RecipectlError(
            f"{recipe_path} has no workload: --check measures one request shape",
            fix="--isl 8192 --osl 1024, or workload: {isl: 8192, osl: 1024} in the recipe",
        )
    return isl, osl


def check_concurrency(
    predictor: RecipePredictor, sla: Sla, *, isl: int, osl: int, given: int | None
) -> tuple[int, str]:
    """The users of the point and why: ``given``; else the highest concurrency predicted to meet
    the SLA on the recipe's configuration (capped by decode's cache); else, where none is, the
    workload's highest level (what the recipe is meant to carry), or 1."""
    if given is not None:
        return given, "given by --concurrency"
    dec = predictor.decode
    cap = dec.endpoints * dec.max_concurrency_per_endpoint if dec.max_concurrency_per_endpoint else None
    limit = min(cap or MAX_CONCURRENCY, MAX_CONCURRENCY)
    best = best_concurrency(predictor.model, sla, predictor.prefill, dec, isl=isl, osl=osl, limit=limit)
    if best is not None:
        return best, "the highest concurrency predicted to meet the SLA"
    w = predictor.recipe.workload
    return (max(w.concurrency) if w else 1), "the workload's highest concurrency (none is predicted to meet the SLA)"


# ----- measuring --------------------------------------------------------------------------------
def measured_metrics(r: PointResult) -> Metrics:
    """The point's median TTFT and ITL (probe.py: per request, vllm bench's TPOT) and its total
    tokens/s: the prompts' and the outputs' tokens over the point's duration."""
    total = r.isl * len(r.samples) + sum(s.output_tokens for s in r.samples)
    return Metrics(ttft_s=r.ttft_s, itl_s=r.itl_s, total_tps=total / r.duration_s if r.duration_s else None)


def meets(sla: Sla, m: Metrics) -> bool:
    """Whether measured medians meet the SLA (an ITL that could not be measured meets no ITL term)."""
    ttft_ok = sla.ttft_s is None or (m.ttft_s is not None and m.ttft_s <= sla.ttft_s)
    itl_ok = sla.itl_s is None or (m.itl_s is not None and m.itl_s <= sla.itl_s)
    return ttft_ok and itl_ok


def measure_point(
    router: str,
    model: str,
    *,
    vocab_size: int,
    isl: int,
    osl: int,
    concurrency: int,
    requests: int,
    out_of_step: bool = False,
) -> tuple[PointResult, Metrics, SteadyState | None]:
    """A warm-up round at the point's concurrency (a batch shape's first run pays its kernels' set-up,
    as calibrate's points do), then ``requests`` by ``concurrency`` closed-loop users, and what they
    measured; a point with a failed request is no measurement (exit 1). ``out_of_step``: the users
    start spread over one cycle of theirs, a second warm-up round's duration (the first pays the
    set-up), and the metrics are those of the window in which all of them were sending
    (probe.PointResult.steady), which is returned too."""
    apart = out_of_step and concurrency > 1
    cycle = warm_up(
        router,
        model,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        vocab_size=vocab_size,
        seed=WARMUP_SEED,
        rounds=2 if apart else 1,
    )
    stagger = cycle if apart else 0.0
    r = run_point(
        router,
        model,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        num_requests=requests,
        vocab_size=vocab_size,
        stagger_s=stagger,
    )
    if r.errors or not r.samples:
        raise RecipectlError(
            f"the check's point (isl={isl} osl={osl} c={concurrency}) failed: "
            f"{len(r.errors)} of {requests} requests: {'; '.join(r.errors[:3])}",
            fix="recipectl doctor RECIPE   (is the deployment serving?)",
            exit_code=ExitCode.FINDINGS,
        )
    if not stagger:
        return r, measured_metrics(r), None
    steady = r.steady()
    if steady is None:
        raise RecipectlError(
            f"the check's point (isl={isl} osl={osl} c={concurrency}), out of step: no time in which all "
            f"{concurrency} users were sending, each sending in it (the users {stagger:.2f} s apart in all, "
            f"{requests} requests)",
            fix="fewer users (--concurrency), or more requests per user (workload.prompts_per_concurrency)",
            exit_code=ExitCode.FINDINGS,
        )
    return r, Metrics(ttft_s=steady.ttft_s, itl_s=steady.itl_s, total_tps=steady.total_tps), steady


def check_report(
    loaded: LoadedRecipe,
    recipe_path: str,
    *,
    sla_text: str,
    calibration: str | None,
    isl: int | None,
    osl: int | None,
    concurrency: int | None,
    attach: str | None,
    as_json: bool,
    out_of_step: bool = False,
) -> dict[str, Any] | None:
    """Predict, measure, compare, file in the ledger; None when interrupted (what was launched is
    stopped by then). Every input is checked before anything is launched."""
    recipe = loaded.recipe
    sla = read_sla(sla_text)
    isl, osl = point_lengths(loaded, recipe_path, isl, osl)
    predictor = recipe_predictor(loaded, recipe_path, calibration)
    c, chosen_by = check_concurrency(predictor, sla, isl=isl, osl=osl, given=concurrency)
    predicted = predictor.at(isl, osl, c)
    w = recipe.workload
    requests = max(MIN_REQUESTS, c * (w.prompts_per_concurrency if w else MIN_REQUESTS))
    if out_of_step:  # enough that every user sends a few while all are sending
        requests = max(requests, OUT_OF_STEP_REQUESTS_PER_USER * c)
    users = "out of step" if out_of_step and c > 1 else "together"
    said = users + (" (one user: out of step is the same)" if out_of_step and c == 1 else "")
    console = Console(stderr=True)
    console.print(
        f"predicted at ISL {isl} / OSL {osl}, {c} user(s) ({chosen_by}): TTFT {predicted.ttft_s * 1e3:,.0f} ms, "
        f"ITL {predicted.itl_s * 1e3:,.1f} ms; measuring {requests} requests, the users {said}",
        highlight=False,
    )
    try:
        with deployment_to_measure(
            recipe_path,
            loaded,
            attach,
            console,
            identity=predictor.identity,
            purpose="check the plan",
            same_endpoints=True,
        ) as state:
            assert state.router_url is not None  # attached_run refuses a run without one; launch gives one
            r, measured, window = measure_point(
                state.router_url,
                recipe.served_name,
                vocab_size=predictor.vocab_size,
                isl=isl,
                osl=osl,
                concurrency=c,
                requests=requests,
                out_of_step=out_of_step,
            )
            run_id = state.run_id
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: nothing measured, nothing filed")
        return None
    pred = predicted_metrics(predicted)
    point = Point(isl=isl, osl=osl, concurrency=c)
    entry = predictor.entry(
        "plan --check",
        point,
        predicted,
        measured,
        run_id,
        requests=len(r.samples),
        users=users,
        sla={"ttft_s": sla.ttft_s, "itl_s": sla.itl_s},
        meets_sla=meets(sla, measured),
        predicted_meets_sla=sla.met_by(predicted),
    )
    ledger: str | None
    try:
        ledger = str(record(recipe, [entry]))
    except OSError as e:  # the measurement stands without its ledger line
        console.print(f"[yellow]not filed in the ledger[/] {ledger_file(recipe)}: {e}")
        ledger = None
    err = errors(pred, measured)
    return {
        "recipe": recipe.name,
        "sla": {"ttft_s": sla.ttft_s, "itl_s": sla.itl_s},
        "calibrated": predictor.model.calibrated,
        "calibration": calibration,
        "configuration": predictor.configuration(),
        "point": {**point.model_dump(), "requests": len(r.samples), "chosen_by": chosen_by, "users": users},
        "run_id": run_id,
        "launched": attach is None,
        "comparison": {
            m: {"predicted": getattr(pred, m), "measured": getattr(measured, m), "error_pct": getattr(err, m)}
            for m in METRICS
        },
        "prediction": predicted.model_dump(mode="json"),
        # the three compared; out of step they are the window's (window_s, window_requests), and
        # duration_s and output_tps the whole run's
        "measured": {
            **measured.model_dump(),
            "duration_s": r.duration_s,
            "output_tps": r.output_tps,
            **({"window_s": window.window_s, "window_requests": window.requests} if window else {}),
        },
        "predicted_meets_sla": sla.met_by(predicted),
        "meets_sla": meets(sla, measured),
        "ledger": ledger,
    }


# ----- printing ---------------------------------------------------------------------------------
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.0f}%"


def _metric_rows(values: dict[str, dict[str, float | None]]) -> list[tuple[str, str, str, str]]:
    ms = lambda v: num(v * 1e3 if v is not None else None, 1)  # noqa: E731
    fmt = {"ttft_s": ("TTFT ms", ms), "itl_s": ("ITL ms", ms), "total_tps": ("total tok/s", num)}
    return [
        (fmt[m][0], fmt[m][1](v["predicted"]), fmt[m][1](v["measured"]), _pct(v["error_pct"]))
        for m, v in values.items()
    ]


def print_check(report: dict[str, Any]) -> None:
    out = Console(highlight=False)
    cfg, pt = report["configuration"], report["point"]
    how = f"calibrated ({report['calibration']})" if report["calibrated"] else "UNCALIBRATED"
    out.print(
        f"{report['recipe']}: {cfg['prefill_endpoints']} prefill (TP{cfg['prefill_tp']}) + "
        f"{cfg['decode_endpoints']} decode (TP{cfg['decode_tp']}) at ISL {pt['isl']} / OSL {pt['osl']}, "
        f"{pt['concurrency']} user(s) {pt['users']}, {pt['requests']} requests; model {how}"
    )
    t = Table()
    for name in ("", "predicted", "measured", "error"):
        t.add_column(name, justify="right" if name else "left", no_wrap=True)
    for row in _metric_rows(report["comparison"]):
        t.add_row(*row)
    out.print(t)
    launched = " (launched for the check, and stopped)" if report["launched"] else ""
    out.print(f"concurrency {pt['concurrency']}: {pt['chosen_by']}; run {report['run_id']}{launched}")
    said = "meets" if report["predicted_meets_sla"] else "misses"
    verdict = "[green]meets the SLA[/]" if report["meets_sla"] else "[red]misses the SLA[/]"
    out.print(f"measured: {verdict} (the plan predicted it {said} it)")
    if not report["calibrated"]:
        out.print("uncalibrated: the prediction comes from peak figures; recipectl calibrate RECIPE -o FILE measures")
    if report["ledger"]:
        out.print(f"filed in {report['ledger']}  (recipectl plan RECIPE --ledger)")


# ----- the ledger -------------------------------------------------------------------------------
def ledger_report(loaded: LoadedRecipe, recipe_path: str) -> dict[str, Any]:
    recipe = loaded.recipe
    path = ledger_file(recipe)
    try:
        entries, skipped = read_entries(path, recipe.name)
    except UnreadableFile as e:
        raise RecipectlError(f"cannot read the ledger {path}: {e.reason}", fix=f"move {path} aside") from None
    # the error per model, and per way the users were started (the model predicts them together)
    models: dict[tuple[str, str], list[LedgerEntry]] = {}
    for entry in entries:
        models.setdefault((entry.calibration, entry.users), []).append(entry)
    return {
        "recipe": recipe.name,
        "ledger": str(path),
        "unreadable_lines": skipped,
        "entries": [e.model_dump(mode="json") for e in entries],
        "median_abs_error_pct": [
            {"calibration": cal, "users": users, "points": len(es), **median_abs_errors(es)}
            for (cal, users), es in models.items()
        ],
    }


def _model_name(calibration: str) -> str:
    return "uncal." if calibration == UNCALIBRATED else Path(calibration).name


def print_ledger(loaded: LoadedRecipe, recipe_path: str, *, as_json: bool) -> int:
    """The ledger's points for the recipe (exit 0, also when there are none)."""
    report = ledger_report(loaded, recipe_path)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return 0
    console = Console(stderr=True, highlight=False)
    if report["unreadable_lines"]:
        n = report["unreadable_lines"]
        console.print(f"[yellow]{n} line(s) of {report['ledger']} could not be read[/]: skipped")
    if not report["entries"]:
        console.print(
            f"no measured points of {report['recipe']} in {report['ledger']}: recipectl plan {recipe_path} "
            "--sla ... --check, or recipectl bench, file them"
        )
        return 0
    ms = lambda v: num(v * 1e3 if v is not None else None, 1)  # noqa: E731

    def metric(key: str, label: str, short: str, fmt) -> list[Col]:
        return [
            Col(f"{label} pred.", f"{short}\npred.", lambda e: fmt(e["predicted"][key])),
            Col(f"{label} meas.", f"{short}\nmeas.", lambda e: fmt(e["measured"][key])),
            Col(f"{label} err.", f"{short}\nerr.", lambda e: _pct(e["error_pct"][key])),
        ]

    groups = [
        [
            Col("at (UTC)", "at (UTC)", lambda e: e["at"].replace("T", " ").rstrip("Z")),
            Col("source", "source", lambda e: e["source"]),
            Col(
                "ISL/OSL/conc.",
                "ISL/OSL\n/conc.",
                lambda e: (
                    "{isl}/{osl}/{concurrency}".format(**e["point"]) + (" apart" if e["users"] == "out of step" else "")
                ),
            ),
            Col("model", "model", lambda e: _model_name(e["calibration"])),
        ],
        [*metric("ttft_s", "TTFT ms", "TTFT", ms), *metric("itl_s", "ITL ms", "ITL", ms)],
        metric("total_tps", "tok/s", "tok/s", num),
    ]
    print_fitted(
        f"{report['recipe']}: predicted against measured, error (predicted - measured) / measured; {report['ledger']}",
        report["entries"],
        groups,
        ["point", "latency", "throughput"],
        lambda e: f"{e['at']} {e['source']}",
    )
    out = Console(highlight=False)
    for m in report["median_abs_error_pct"]:
        cal = "uncalibrated" if m["calibration"] == UNCALIBRATED else f"calibrated ({m['calibration']})"
        parts = ", ".join(
            f"{label} {'-' if m[k] is None else f'{m[k]:.0f}%'}"
            for k, label in (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("total_tps", "tok/s"))
        )
        users = ", users out of step" if m["users"] == "out of step" else ""
        out.print(f"median |error|, {cal}{users}, {m['points']} point(s): {parts}")
    return 0
