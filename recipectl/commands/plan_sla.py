"""`plan --sla`'s other layouts, its picture and its recipe: the TP per role it ranks beside the
recipe's own (what the capacity planner and the engine's head-splitting rules allow), the picture
of the ranked configurations (`--plot`), and the chosen configuration written as a recipe
(`--write-recipe`), the input's comments kept."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedSeq

from ..bench.sweep import devices
from ..diagnostics import Severity
from ..engine_versions import has_fix
from ..errors import ExitCode, RecipectlError
from ..fileio import UnreadableFile, read_text_bounded, write_atomic
from ..fix.document import Document, Unfixable
from ..hardware import Parallelism
from ..loader import load_text
from ..matrix import value_at
from ..models.spec import ModelSpec
from ..plan.perf import PerfModel, RoleShape, at_tp
from ..plan.recipe_plan import RolePlan
from ..plan.sla import LayoutOption, Sla, curve
from ..rules.registry import Edit
from ..schema import Recipe
from ..validate import report_for
from .calibrate import layout, role_shapes
from .import_ import comment_text
from .outfile import check_out, write_out

TP_SIZES = (1, 2, 4, 8)
PLOT_FIX = "pip install matplotlib   (or: pip install 'recipectl[plot]')"
CURVES = 5  # configurations the picture draws


# ----- TP per role ------------------------------------------------------------------------------
def ttft_range_text(p: dict) -> str:
    """Why a prediction's TTFT is a range (ttft_low_s < ttft_high_s) and its midpoint predicted: what
    the model does not know of where the time goes."""
    why = []
    if p["transfer_sources"] > 1:
        why.append(
            f"{p['transfer_sources']} prefill endpoints feed a decode endpoint and how far their transfers overlap "
            "is not measured: TTFT is midway between all in parallel and one after another"
        )
    if p.get("wave_after_own_s", 0) > 0:
        why.append(
            "a prompt that ends before its wave's last prefill step waits for part of the steps after it, more or "
            "less by host (each role on cores of its own): TTFT is midway between its own last step and the wave's"
        )
    return "; ".join(why)


def tp_choices(recipe: Recipe, role: str, spec: ModelSpec, budget: int) -> list[int]:
    """The TPs a role's endpoint can run at, its own among them: powers of two up to a node's GPUs
    and the budget (one device left for the other role), each dividing the attention heads, the KV
    heads dividing it or it them (vLLM replicates KV heads past their count), and with expert
    parallel the experts splitting over TP x DP (TOP002). The linear-attention heads and whether the
    cache holds a request at that TP are the capacity planner's to say (layout_options). On the CPU
    platform only the recipe's own: an endpoint there is bound to its cores, which plan does not
    choose."""
    par = recipe.roles[role].parallel
    if recipe.cluster.is_cpu:
        return [par.tp]
    out = []
    for tp in TP_SIZES:
        kv = spec.num_key_value_heads
        fits = tp <= recipe.cluster.gpus_per_node and tp * par.dp <= budget - 1
        splits = spec.num_attention_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)
        experts = not (par.expert_parallel and spec.num_experts and spec.num_experts % (tp * par.dp))
        if fits and splits and experts:
            out.append(tp)
    return sorted({*out, par.tp})


def pair_allowed(recipe: Recipe, spec: ModelSpec, prefill_tp: int, decode_tp: int) -> bool:
    """Whether the engine transfers between the two TPs: a hybrid model needs the same TP on both
    roles unless the release handles heterogeneous TP (CON001, engine fact
    hybrid-heterogeneous-tp); any other model refuses a prefill TP above decode's once it passes
    the KV heads (CON002)."""
    if prefill_tp == decode_tp:
        return True
    if recipe.is_hybrid or spec.num_linear_attention_layers:
        return bool(has_fix(recipe.engine.version, frozenset(recipe.engine.patches), "hybrid-heterogeneous-tp"))
    return not (prefill_tp > decode_tp and prefill_tp > spec.num_key_value_heads)


def recipe_at_tp(recipe: Recipe, tps: dict[str, int]) -> Recipe:
    """The recipe with each role of ``tps`` at that TP (its DP and expert parallel kept)."""
    update = {
        role: recipe.roles[role].model_copy(
            update={"parallel": recipe.roles[role].parallel.model_copy(update={"tp": tp})}
        )
        for role, tp in tps.items()
    }
    return recipe.model_copy(update=update)


def layout_options(
    recipe: Recipe,
    recipe_path: str,
    model: PerfModel,
    shapes: dict[str, RoleShape],
    plans: dict[str, RolePlan],
    spec: ModelSpec,
    *,
    budget: int,
    keep_layout: bool,
) -> tuple[list[LayoutOption], dict[tuple[str, int], str]]:
    """The recipe's own layout and, unless ``keep_layout``, every allowed pair of other TPs, each
    with its shapes from the capacity planner at that TP (KV bytes and GDN state per rank, the
    requests a decode endpoint keeps resident) and the model moved there (perf.at_tp); a TP whose
    heads do not split or whose cache holds no request of max_model_len (vLLM would not start it) is
    left out. Also the layout label of each (role, TP), as recipes write it."""
    own = (shapes["prefill"].tp, shapes["decode"].tp)
    reference = (shapes["prefill"], shapes["decode"])
    options = [LayoutOption(prefill=reference[0], decode=reference[1], model=model, extrapolated=False)]
    labels = {(role, rp.plan.tp): layout(rp.plan) for role, rp in plans.items()}
    if keep_layout:
        return options, labels
    for p_tp in tp_choices(recipe, "prefill", spec, budget):
        for d_tp in tp_choices(recipe, "decode", spec, budget):
            if (p_tp, d_tp) == own or not pair_allowed(recipe, spec, p_tp, d_tp):
                continue
            try:
                at, planned, _ = role_shapes(recipe_at_tp(recipe, {"prefill": p_tp, "decode": d_tp}), recipe_path)
            except ValueError:  # a TP that splits no linear-attention head evenly
                continue
            if any(rp.plan.max_concurrency < 1 for rp in planned.values()):
                continue
            pair = (at["prefill"], at["decode"])
            options.append(
                LayoutOption(prefill=pair[0], decode=pair[1], model=at_tp(model, reference, pair), extrapolated=True)
            )
            labels.update({(role, rp.plan.tp): layout(rp.plan) for role, rp in planned.items()})
    return options, labels


def curves(options: list[LayoutOption], ranked: list, sla: Sla, *, isl: int, osl: int) -> list[dict]:
    """The picture's lines: for the first CURVES configurations (those meeting the SLA, else the
    first ranked), the predictions from 1 user to past the chosen concurrency (twice it, at least
    8, at most what decode's cache keeps resident)."""
    by_tp = {(o.prefill.tp, o.decode.tp): o for o in options}
    met = [c for c in ranked if c.concurrency] or ranked
    out = []
    for c in met[:CURVES]:
        o = by_tp[(c.prefill_tp, c.decode_tp)]
        pre = o.prefill.model_copy(update={"endpoints": c.prefill_endpoints})
        dec = o.decode.model_copy(update={"endpoints": c.decode_endpoints})
        upto = max(8, 2 * (c.concurrency or 1))
        if c.capacity:
            upto = min(upto, c.capacity)
        # over the devices the configuration is on (servers sharing GPUs: sla.rank's laid_out)
        points = curve(o.model, sla, pre, dec, isl=isl, osl=osl, upto=upto, also=c.concurrency, devices=c.gpus)
        out.append(
            {
                "prefill_endpoints": c.prefill_endpoints,
                "decode_endpoints": c.decode_endpoints,
                "prefill_tp": c.prefill_tp,
                "decode_tp": c.decode_tp,
                "points": points,
            }
        )
    return out


# ----- the picture ------------------------------------------------------------------------------
def pyplot() -> Any:
    """matplotlib's pyplot on the file backend, or the error that says how to install it (exit 2):
    asked before any planning, so that a missing library costs nothing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RecipectlError("--plot needs matplotlib, which is not installed", fix=PLOT_FIX) from None
    return plt


def check_plot_out(path: str, recipe_path: str) -> None:
    """Before planning: the picture never replaces the recipe being planned (any other file at
    PATH is replaced, a link by the picture itself, as a plot's output is)."""
    try:
        same = os.path.samefile(path, recipe_path)
    except OSError:  # no such file yet: nothing to lose
        same = False
    if same:
        raise RecipectlError(
            f"--plot {path} is {recipe_path}, the recipe being planned; nothing was written",
            fix="--plot names the picture to write, e.g. --plot sla.png",
        )


def plot_sla(plt: Any, report: dict, path: str) -> None:
    """TPS per device against tokens/s per user, one line per configuration of report["curves"]
    across concurrency, the ITL target's line (tokens/s per user = 1 / ITL) and the chosen point;
    written in one rename (a kill leaves no half-written picture)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    layouts = {(c["prefill_tp"], c["decode_tp"]): c for c in report["configurations"]}
    for line in report["curves"]:
        shown = layouts.get((line["prefill_tp"], line["decode_tp"]), {})
        label = (
            f"{line['prefill_endpoints']} x {shown.get('prefill_layout', 'TP' + str(line['prefill_tp']))} + "
            f"{line['decode_endpoints']} x {shown.get('decode_layout', 'TP' + str(line['decode_tp']))}"
        )
        pts = line["points"]
        (drawn,) = ax.plot([p["tps_per_user"] for p in pts], [p["tps_per_gpu"] for p in pts], lw=1, label=label)
        ok = [p for p in pts if p["meets_sla"]]
        miss = [p for p in pts if not p["meets_sla"]]  # hollow: past the SLA
        ax.plot([p["tps_per_user"] for p in ok], [p["tps_per_gpu"] for p in ok], "o", ms=4, color=drawn.get_color())
        ax.plot(
            [p["tps_per_user"] for p in miss],
            [p["tps_per_gpu"] for p in miss],
            "o",
            ms=4,
            mfc="none",
            color=drawn.get_color(),
        )
        for p in pts:
            ax.annotate(str(p["concurrency"]), (p["tps_per_user"], p["tps_per_gpu"]), fontsize=6, alpha=0.6)
    itl = report["sla"]["itl_s"]
    if itl:
        ax.axvline(1 / itl, color="red", linestyle="--", label=f"SLA: ITL {itl * 1e3:g} ms = {1 / itl:g} tok/s/user")
    chosen = next((c for c in report["configurations"] if c["concurrency"]), None)
    if chosen:
        p = chosen["prediction"]
        ax.plot(
            [p["tps_per_user"]],
            [p["tps_per_gpu"]],
            marker="*",
            ms=16,
            color="black",
            linestyle="none",
            label=f"chosen: {chosen['prefill_endpoints']} + {chosen['decode_endpoints']} endpoints, "
            f"{chosen['concurrency']} users",
        )
    how = "calibrated" if report["calibrated"] else "UNCALIBRATED"
    ax.set_title(f"{report['recipe']}: ISL {report['isl']} / OSL {report['osl']} ({how})", fontsize=9)
    ax.set_xlabel("tokens/s per user (1 / ITL)")
    ax.set_ylabel("TPS per device")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    try:
        write_atomic(path, buf.getvalue())
    except OSError as e:
        raise RecipectlError(
            f"--plot {path}: cannot write the picture: {(e.strerror or type(e).__name__).lower()}",
            fix="--plot names a file in a directory that exists and you can write to",
        ) from None


# ----- the chosen configuration as a recipe -----------------------------------------------------
def check_recipe_out(out: str, inputs: list[str], *, force: bool) -> None:
    """Before planning: OUT must be a new file (or --force over a regular one), never a link nor
    a file the recipe was read from (``files_read``)."""
    check_out(out, inputs, force=force, flag="--write-recipe", read_as="being planned")


def planned_edits(recipe: Recipe, chosen: dict, isl: int, osl: int) -> tuple[list[Edit], list[str]]:
    """The edits that make the recipe the chosen configuration (endpoints and TP per role, the
    workload's concurrency, its ISL/OSL where the plan used others) and the keys to remove with
    why: a role's per-endpoint `devices` once its endpoints or TP change, its `cpu_cores` once its
    endpoints do (they would name the old layout; placement then assigns them)."""
    edits: list[Edit] = []
    removed: list[str] = []
    for role in ("prefill", "decode"):
        spec = recipe.roles[role]
        n, tp = chosen[f"{role}_endpoints"], chosen[f"{role}_tp"]
        if n != spec.endpoints:
            edits.append(Edit(f"{role}.endpoints", n))
        if tp != spec.parallel.tp:
            par = Parallelism(tp=tp, dp=spec.parallel.dp, expert_parallel=spec.parallel.expert_parallel)
            edits.append(Edit(f"{role}.parallel", par.label))
        if spec.devices is not None and (n != spec.endpoints or tp != spec.parallel.tp):
            removed.append(f"{role}.devices")
        if spec.cpu_cores is not None and n != spec.endpoints:
            removed.append(f"{role}.cpu_cores")
    w = recipe.workload
    if w is None or w.isl != isl:
        edits.append(Edit("workload.isl", isl))
    if w is None or w.osl != osl:
        edits.append(Edit("workload.osl", osl))
    levels = CommentedSeq([chosen["concurrency"]])
    levels.fa.set_flow_style()  # as recipes write it: concurrency: [64]
    edits.append(Edit("workload.concurrency", levels))
    return edits, removed


def recipe_text(loaded, recipe_path: str, report: dict, chosen: dict) -> str:
    """The input recipe's text with the chosen configuration's edits made (ruamel.yaml's round
    trip: comments, order and quoting kept) and a header saying which plan chose it."""
    try:
        text = read_text_bounded(recipe_path)
    except UnreadableFile as e:
        raise RecipectlError(f"{recipe_path}: cannot read the recipe again: {e.reason}") from None
    edits, removed = planned_edits(loaded.recipe, chosen, report["isl"], report["osl"])
    fix = "edit the recipe by hand from the ranked table (or --format json)"
    try:
        doc = Document(text)
        if loaded.variant is not None:
            # the variant planned, alone: the matrix's values for it set as plain fields, the
            # matrix dropped (written whole, it would expand into every variant again)
            variant = [Edit(key, value_at(loaded.raw, key)) for key in doc.matrix_keys]
            variant.append(Edit("name", loaded.recipe.name))
            del doc.data["matrix"]
            edits = variant + edits
        clash = sorted({edit.path for edit in edits} & set(doc.matrix_keys))
        if clash:
            raise RecipectlError(
                f"{recipe_path}: its matrix sets {', '.join(clash)}, which --write-recipe would change; "
                "nothing was written",
                fix=f"recipectl expand {recipe_path} prints each variant: save the one to plan as its own "
                f"file and plan that; or {fix}",
            )
        for edit in edits:
            doc.check(edit)
            doc.apply(edit)
        for key in removed:
            role, _, field = key.partition(".")
            del doc.data[role][field]
        edited = doc.text_after()
    except Unfixable as e:
        raise RecipectlError(f"{recipe_path}: cannot write the chosen configuration: {e}", fix=fix) from None
    return _header(recipe_path, report, chosen, removed) + edited


def _header(recipe_path: str, report: dict, chosen: dict, removed: list[str]) -> str:
    s = report["sla"]
    sla = ",".join(
        x
        for x in (f"ttft={s['ttft_s']:g}s" if s["ttft_s"] else "", f"itl={s['itl_s'] * 1e3:g}ms" if s["itl_s"] else "")
        if x
    )
    how = f"calibration {report['calibration']}" if report["calibrated"] else "UNCALIBRATED: analytic defaults"
    p = chosen["prediction"]
    lines = [
        f"Written by recipectl plan {Path(recipe_path).name} --sla {sla} ({how}), ISL {report['isl']} / OSL "
        f"{report['osl']}, {report['gpus']} device(s):",
        f"{chosen['prefill_endpoints']} prefill x {chosen['prefill_layout']} + {chosen['decode_endpoints']} decode x "
        f"{chosen['decode_layout']} at concurrency {chosen['concurrency']}: predicted TTFT {p['ttft_s'] * 1e3:,.0f} "
        f"ms, ITL {p['itl_s'] * 1e3:,.1f} ms, {p['tps_per_gpu']:,.1f} TPS/device; binding: {chosen['binding']}"
        + ("; TP extrapolated from the recipe's" if chosen.get("extrapolated") else ""),
    ]
    if p["ttft_low_s"] < p["ttft_high_s"]:
        lines.append(
            f"TTFT between {p['ttft_low_s'] * 1e3:,.0f} and {p['ttft_high_s'] * 1e3:,.0f} ms: {ttft_range_text(p)}"
        )
    if removed:
        lines.append(f"removed {', '.join(removed)}: they named the old layout's endpoints (placement assigns them)")
    return "".join(f"# {comment_text(line)}\n" for line in lines)


def write_recipe(loaded, recipe_path: str, report: dict, out: str) -> str:
    """Write the top-ranked configuration that meets the SLA to ``out`` (checked by
    check_recipe_out first), refused unless the written recipe loads and its rules find no error;
    none meeting the SLA: nothing written, exit 1. Returns what was written."""
    chosen = next((c for c in report["configurations"] if c["concurrency"]), None)
    if chosen is None:
        raise RecipectlError(
            f"no configuration meets the SLA even at one user; nothing was written to {out}",
            fix="relax the SLA (the binding column says what limits it), or give --gpus more devices",
            exit_code=ExitCode.FINDINGS,
        )
    text = recipe_text(loaded, recipe_path, report, chosen)
    found, _ = report_for(load_text(text, out, base_dir=Path(out).parent))
    errors = [d for d in found.diagnostics if d.severity is Severity.ERROR]
    if not found.valid or errors:
        shown = "; ".join(f"{d.code} {d.message}" for d in errors[:3]) or "the recipe does not load"
        own = devices(loaded.recipe)
        ways = ["edit the recipe by hand from the ranked table"]
        if chosen["extrapolated"]:  # at another TP than the recipe's: its own may validate
            ways.insert(0, "plan with --keep-layout")
        if report["gpus"] > own:
            more = f"plan with --gpus {own} or fewer, or give the recipe's cluster more nodes (it has {own} device(s))"
            ways.insert(0, more)
        raise RecipectlError(
            f"the chosen configuration does not validate ({shown}); nothing was written to {out}",
            fix="; or ".join(ways),
            exit_code=ExitCode.FINDINGS,
        )
    write_out(out, text, flag="--write-recipe")
    return text
