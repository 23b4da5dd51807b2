"""Checks against a running deployment: health, models, version, metrics; then the proofs —
KV really moved over NIXL, P/D output equals an aggregated reference, GSM8K passes its gate."""

from __future__ import annotations

import socket
import uuid
from urllib.parse import urlsplit

import httpx

from ..diagnostics import CheckResult, Status
from ..fieldtypes import parse_version
from ..schema import Recipe
from .client import post_json
from .doctor import DoctorRun, Subject, Targets, check, found
from .gsm8k import gate, run_gsm8k
from .metrics import scrape_metrics, transfer_evidence
from .parity import DEFAULT_PROMPTS, run_parity

E, P = "endpoints", "proofs"
PASS, WARN, FAIL, SKIP = Status.PASS, Status.WARN, Status.FAIL, Status.SKIP
HEALTH = "endpoints.health"  # what needs a healthy server says so: needs=(HEALTH,)


def _deployed(run: DoctorRun) -> bool:
    return run.targets.any


def _endpoints(run: DoctorRun) -> list[Subject]:
    return run.targets.endpoints()


def _everything(run: DoctorRun) -> list[Subject]:
    return run.targets.everything()


def _request_limit(run: DoctorRun) -> float:
    return run.timeout


def _client(run: DoctorRun) -> httpx.AsyncClient:
    """The run's HTTP client: run_checks makes one whenever there is a deployment, and every check
    here is wanted only then."""
    assert run.client is not None
    return run.client


@check(key="endpoints.deployment", name="deployment", stage=E, timeout=5, wanted=lambda run: not run.targets.any)
async def _no_deployment(run: DoctorRun, on: Subject) -> CheckResult:
    return found(
        SKIP,
        "no running deployment found",
        "recipectl launch RECIPE --detach, or give --router/--prefill/--decode URLs",
    )


@check(key=HEALTH, name="health {label}", stage=E, timeout=_request_limit, subjects=_everything, wanted=_deployed)
async def _health(run: DoctorRun, on: Subject) -> CheckResult:
    try:
        r = await _client(run).get(on[1] + "/health")
    except httpx.HTTPError as e:
        return found(
            FAIL,
            f"down: {type(e).__name__} {e}".strip(),
            "recipectl status / recipectl logs: the process is not serving",
        )
    if r.status_code == 200:
        return found(PASS, "200")
    return found(FAIL, f"HTTP {r.status_code}", "recipectl logs to see why it is unhealthy")


@check(
    key="endpoints.models",
    name="models {label}",
    stage=E,
    timeout=_request_limit,
    subjects=_everything,
    wanted=_deployed,
    interleave="endpoint",
    explained_by_logs=True,
)
async def _models(run: DoctorRun, on: Subject) -> CheckResult:
    want = run.targets.model
    r = await _client(run).get(on[1] + "/v1/models")
    if r.status_code != 200:
        return found(FAIL, f"HTTP {r.status_code}")
    ids = [m.get("id") for m in r.json().get("data", [])]
    if want and want not in ids:
        return found(
            FAIL, f"serves {ids}, the recipe expects {want!r}", "check model.served_name / --served-model-name"
        )
    return found(PASS, ", ".join(map(str, ids)))


@check(
    key="endpoints.version",
    name="version {label}",
    stage=E,
    timeout=_request_limit,
    subjects=_endpoints,
    wanted=_deployed,
    interleave="endpoint",
    explained_by_logs=True,
)
async def _version(run: DoctorRun, on: Subject) -> CheckResult:
    recipe = run.recipe
    r = await _client(run).get(on[1] + "/version")
    if r.status_code != 200:
        return found(WARN, f"/version: HTTP {r.status_code}")
    v = r.json().get("version", "?")
    if recipe and recipe.engine.vllm_version and parse_version(v) != recipe.engine.version:
        return found(
            FAIL,
            f"vLLM {v}; the recipe says {recipe.engine.vllm_version}",
            "the rules judged the recipe's version: fix engine.vllm_version or the image",
        )
    return found(PASS, f"vLLM {v}")


@check(
    key="endpoints.metrics",
    name="metrics {label}",
    stage=E,
    timeout=_request_limit,
    subjects=_endpoints,
    wanted=_deployed,
    interleave="endpoint",
    explained_by_logs=True,
)
async def _metrics(run: DoctorRun, on: Subject) -> CheckResult:
    m = await scrape_metrics(_client(run), on[1])
    usage = f"{m.kv_cache_usage * 100:.1f}%" if m.kv_cache_usage is not None else "?"
    detail = f"KV cache {usage}, running {m.requests_running or 0:.0f}, waiting {m.requests_waiting or 0:.0f}"
    return found(PASS, detail, data=m.model_dump())


PD_PROMPT = ("Disaggregated serving moves the prompt's state from prefill to decode. " * 12).strip()


async def pd_proof(targets: Targets, client: httpx.AsyncClient, timeout: float) -> CheckResult:
    """One request through the router; decode's counters must show the prompt arrived by transfer."""
    if not targets.router or not targets.decode:
        return found(SKIP, "needs the router and decode URLs")
    before = [await scrape_metrics(client, u) for u in targets.decode]
    body = {"model": targets.model, "prompt": PD_PROMPT, "max_tokens": 8, "temperature": 0}
    await post_json(client, targets.router.rstrip("/") + "/v1/completions", body, timeout_s=timeout, retries=1)
    after = [await scrape_metrics(client, u) for u in targets.decode]
    evidences = [transfer_evidence(b, a) for b, a in zip(before, after, strict=True)]
    moved = [e for e in evidences if e.transferred]
    data = {"decode": [e.model_dump() for e in evidences]}
    if moved:
        e = moved[0]
        detail = (
            f"external-transfer prompt tokens +{e.external_transfer_tokens or 0:.0f}, NIXL bytes "
            f"+{e.nixl_bytes or 0:,.0f} in {e.nixl_transfers or 0:.0f} transfer(s), failed "
            f"{e.failed_transfers or 0:.0f}; local compute +{e.local_compute_tokens or 0:.0f}"
        )
        return found(PASS, detail, data=data)
    return found(
        FAIL,
        evidences[0].message if evidences else "no decode metrics",
        "decode recomputed the prompt: check kv_transfer roles, NIXL side channel, router --kv-connector",
        data=data,
    )


NIXL_PATH = "NIXL path (prefill host -> decode host)"


def _address(host: str) -> str | None:
    """The address `host` resolves to here (where doctor runs), or None."""
    try:
        address = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except (OSError, IndexError):
        return None
    return address if isinstance(address, str) else None  # an IPv4 or IPv6 address: text


async def nixl_path(targets: Targets, client: httpx.AsyncClient, timeout: float) -> CheckResult:
    """Where the KV came from and went to: one request sent as the router sends it, in two halves.
    Prefill answers with the side-channel host and port decode must dial (its
    VLLM_NIXL_SIDE_CHANNEL_HOST/PORT, in `kv_transfer_params`); decode, given them, pulls the blocks,
    and its counters must show the transfer. Both hosts are resolved here: two different addresses
    mean the KV crossed from one host to another."""
    if not targets.prefill or not targets.decode:
        return found(SKIP, "needs the prefill and decode URLs")
    prefill, decode = targets.prefill[0], targets.decode[0]
    # a prompt no server has seen: a prefix-cache hit on decode would need no transfer
    prompt = f"{uuid.uuid4().hex} {PD_PROMPT}"
    before = await scrape_metrics(client, decode)
    ask = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    first = await post_json(
        client,
        prefill.rstrip("/") + "/v1/completions",
        {"model": targets.model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "kv_transfer_params": ask},
        timeout_s=timeout,
        retries=0,
    )
    params = first.get("kv_transfer_params") or {}
    if not params.get("remote_host"):
        return found(
            FAIL,
            f"prefill {prefill} returned no kv_transfer_params with a remote_host",
            "is it a NIXL kv_producer? (kv_transfer.connector, prefill kv_role)",
        )
    await post_json(
        client,
        decode.rstrip("/") + "/v1/completions",
        {"model": targets.model, "prompt": prompt, "max_tokens": 2, "temperature": 0, "kv_transfer_params": params},
        timeout_s=timeout,
        retries=0,
    )
    after = await scrape_metrics(client, decode)
    evidence = transfer_evidence(before, after)
    src_host, src_port = str(params["remote_host"]), params.get("remote_port")
    dst_host = urlsplit(decode).hostname or decode
    src_addr, dst_addr = _address(src_host), _address(dst_host)
    cross = src_addr is not None and dst_addr is not None and src_addr != dst_addr
    data = {
        "from": {"host": src_host, "port": src_port, "address": src_addr, "url": prefill},
        "to": {"host": dst_host, "address": dst_addr, "url": decode},
        "between_hosts": cross,
        "evidence": evidence.model_dump(),
    }
    where = (
        f"prefill's side channel {src_host}:{src_port} ({src_addr or 'unresolved'}) -> decode {dst_host} "
        f"({dst_addr or 'unresolved'})"
    )
    if not evidence.transferred:
        return found(
            FAIL,
            f"{where}: {evidence.message}",
            "decode could not pull from that address: check VLLM_NIXL_SIDE_CHANNEL_HOST (it must be "
            "an address decode reaches) and UCX_NET_DEVICES on both hosts",
            data=data,
        )
    hosts = "between two hosts" if cross else "on one host" if src_addr == dst_addr else "hosts unresolved"
    return found(
        PASS,
        f"{where}, {hosts}: NIXL bytes +{evidence.nixl_bytes or 0:,.0f}, "
        f"external-transfer prompt tokens +{evidence.external_transfer_tokens or 0:.0f}",
        data=data,
    )


async def parity(
    recipe: Recipe | None, targets: Targets, client: httpx.AsyncClient, reference: str | None, timeout: float
) -> CheckResult:
    cfg = recipe.checks.parity if recipe else None
    ref = (
        reference
        or (cfg.reference if cfg and cfg.reference != "prefill" else None)
        or (targets.prefill[0] if targets.prefill else None)
    )
    if not targets.router or not ref:
        return found(SKIP, "needs the router and a reference URL")
    n = cfg.num_prompts if cfg else 20
    result = await run_parity(
        client,
        targets.router,
        ref,
        targets.model or "",
        prompts=DEFAULT_PROMPTS[:n],
        max_tokens=cfg.max_tokens if cfg else 32,
        near_tie_nats=cfg.near_tie_nats if cfg else 0.1,
        min_exact_match_rate=cfg.min_match_rate if cfg else 0.5,
        request_timeout_s=timeout,
        # compare token ids: two different tokens can render as the same text
        token_ids=True,
    )
    data = result.model_dump()
    bad = [p for p in result.prompts if p.classification not in ("match", "near_tie")]
    detail = f"{result.message}"
    if bad:
        detail += (
            "; "
            + "; ".join(
                f"prompt {i}: {p.classification} at token {p.first_divergence} (margin "
                f"{'?' if p.margin_nats is None else f'{p.margin_nats:.3f}'} nats)"
                for i, p in enumerate(result.prompts)
                if p.classification not in ("match", "near_tie")
            )[:600]
        )
    return found(
        PASS if result.passed else FAIL,
        detail,
        ""
        if result.passed
        else "P/D output differs from the reference where the reference was "
        "confident: transferred state is corrupt (async-scheduling race? layout? dtype?)",
        data=data,
    )


GSM8K_GATE = "GSM8K accuracy gate"
GSM8K_PIPELINE = "GSM8K pipeline (accuracy not gated)"


def gsm8k_bar(recipe: Recipe | None) -> tuple[float, float]:
    """(threshold, tolerance) of the recipe's GSM8K check; without a recipe, no bar."""
    cfg = recipe.checks.gsm8k if recipe else None
    return (cfg.threshold, cfg.tolerance) if cfg else (0.0, 0.0)


def gsm8k_check_name(recipe: Recipe | None) -> str:
    """The check named for what it can prove: with a bar of 0 (threshold - tolerance <= 0, as on
    random weights) every accuracy passes, so it proves the pipeline (prompts, requests, stop words,
    scoring), not accuracy."""
    threshold, tolerance = gsm8k_bar(recipe)
    return GSM8K_GATE if threshold - tolerance > 0 else GSM8K_PIPELINE


async def gsm8k(
    recipe: Recipe | None, targets: Targets, client: httpx.AsyncClient, progress, num_questions: int | None
) -> CheckResult:
    if not targets.router:
        return found(SKIP, "needs the router URL")
    cfg = recipe.checks.gsm8k if recipe else None
    n = num_questions or (cfg.num_questions if cfg else 200)
    result = await run_gsm8k(
        client,
        targets.router,
        targets.model or "",
        num_questions=n,
        num_shots=cfg.num_shots if cfg else 5,
        concurrency=cfg.concurrency if cfg else 64,
        max_tokens=cfg.max_tokens if cfg else 256,
        request_timeout_s=cfg.timeout_s if cfg else 600,
        on_progress=progress,
    )
    verdict = gate(result, *gsm8k_bar(recipe))
    p50 = f"{result.latency_p50_s:.2f}s" if result.latency_p50_s is not None else "?"
    p99 = f"{result.latency_p99_s:.2f}s" if result.latency_p99_s is not None else "?"
    detail = (
        f"accuracy {result.accuracy:.3f} on {result.n} (invalid {result.invalid_rate:.1%}), "
        f"latency p50 {p50} p99 {p99}, {result.output_tokens_per_s:.1f} tok/s; {verdict.message}"
    )
    return found(
        PASS if verdict.passed else FAIL,
        detail,
        ""
        if verdict.passed
        else "accuracy below the recipe's bar: run parity to tell corruption from a model or prompt problem",
        data={"result": result.model_dump(), "gate": verdict.model_dump()},
    )


def _proofs(run: DoctorRun) -> bool:
    return run.targets.any and run.proofs


@check(
    key="proofs.pd-transfer",
    name="P/D transfer (NIXL)",
    stage=P,
    timeout=lambda run: run.timeout * 6,
    wanted=_proofs,
    needs=(HEALTH,),
    status="P/D proof: one request through the router ...",
    explained_by_logs=True,
)
async def _pd_transfer(run: DoctorRun, on: Subject) -> CheckResult:
    return await pd_proof(run.targets, _client(run), run.timeout * 4)


@check(
    key="proofs.nixl-path",
    name=NIXL_PATH,
    stage=P,
    timeout=lambda run: run.timeout * 6,
    wanted=_proofs,
    needs=(HEALTH,),
    status="NIXL path: prefill's side channel to decode ...",
    explained_by_logs=True,
)
async def _nixl_path(run: DoctorRun, on: Subject) -> CheckResult:
    return await nixl_path(run.targets, _client(run), run.timeout * 4)


@check(
    key="proofs.parity",
    name="parity (P/D vs reference)",
    stage=P,
    timeout=lambda run: run.timeout * 40,
    wanted=lambda run: _proofs(run) and run.parity,
    needs=(HEALTH,),
    status="parity: P/D against the aggregated reference ...",
    explained_by_logs=True,
)
async def _parity(run: DoctorRun, on: Subject) -> CheckResult:
    return await parity(run.recipe, run.targets, _client(run), run.reference, run.timeout * 10)


def _gsm8k_questions(run: DoctorRun) -> int:
    return run.gsm8k_questions or (run.recipe.checks.gsm8k.num_questions if run.recipe else 200)


@check(
    key="proofs.gsm8k",
    name="GSM8K",
    title=lambda run: gsm8k_check_name(run.recipe),
    stage=P,
    timeout=lambda run: (run.recipe.checks.gsm8k.timeout_s if run.recipe else 600) * 3,
    wanted=lambda run: _proofs(run) and run.gsm8k,
    needs=(HEALTH,),
    progress_total=_gsm8k_questions,
    explained_by_logs=True,
)
async def _gsm8k(run: DoctorRun, on: Subject) -> CheckResult:
    return await gsm8k(run.recipe, run.targets, _client(run), run.progress, run.gsm8k_questions)
