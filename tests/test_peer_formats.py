"""Recipes as the peers publish them today: Dynamo's v1beta1 CRD with ConfigMaps, Secrets and
Kubernetes' $(VAR); bash -lc scripts and envsubst placeholders; shell variables in vllm serve
scripts; srt-slurm's sa-bench lengths; other engines refused in one line; hybrid-ness from the
model's architecture; severities that follow the publishers' own evidence."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recipectl.formats import import_text
from recipectl.formats.flags import read_flags
from recipectl.formats.registry import NotImportable
from recipectl.formats.shellvars import Scope, expand, expand_k8s, expand_words, read_assignments
from recipectl.formats.shellwords import shell_words
from recipectl.validate import validate_file

from .recipe_text import edited

ROOT = Path(__file__).resolve().parent.parent
FIELD = ROOT / "tests" / "field"
OTHER = ROOT / "tests" / "fixtures" / "other-backends"


def _findings(path: Path) -> list[tuple[str, str, str, str]]:
    report, _ = validate_file(path)
    assert report.valid, [d.message for d in report.diagnostics]
    return [(d.code, d.severity.value, d.path, d.message) for d in report.diagnostics]


def _recipectl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


# ------------------------------------------------------------------------------------- Dynamo
def test_v1beta1_components_read_kv_roles_from_the_configmap():
    """spec.components, the KV transfer config in a ConfigMap of the same file read through
    `$(KV_TRANSFER_CONFIG)`: the roles are the ConfigMap's, nothing is left as a flag to judge."""
    path = FIELD / "dynamo" / "qwen35-122b-nvfp4-b200-disagg-1p2d-v1beta1.yaml"
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("prefill", "kv_role")) == "kv_producer"
    assert imp.get(("decode", "kv_role")) == "kv_consumer"
    assert imp.get(("kv_transfer", "extra_config")) == {"num_threads": 8}
    assert imp.get(("decode", "endpoints")) == 2
    assert imp.get(("decode", "async_scheduling")) is False
    assert not any("KV_TRANSFER_CONFIG" in a for a in imp.get(("prefill", "extra_args"), []))
    # dynamo.vllm's own --enable-multimodal is not vLLM's (vllm serve refuses it): not carried, said so;
    # vLLM's --enable-mm-embeds, next to it, is
    assert "--enable-multimodal" not in imp.get(("prefill", "extra_args"))
    assert "--enable-mm-embeds" in imp.get(("prefill", "extra_args"))
    assert any("--enable-multimodal is a dynamo.vllm option" in d.why for d in imp.dropped)
    # the Secret is named as not read, never read
    assert any("hf-token-secret" in d.what for d in imp.dropped)


def test_dynamos_own_options_are_not_carried_and_take_the_words_their_parser_gives_them():
    """An on/off switch of dynamo.vllm's takes no value (the word after it is vLLM's positional
    model here), `--connector` takes several, `--no-X` is X's switch."""
    line = "vllm serve --enable-multimodal Qwen/Qwen3.5-9B --connector nixl lmcache --no-omni --port 8100"
    [words] = shell_words(line)
    flags = read_flags(words[2:], positional_model=True)
    assert flags.model is not None and flags.model[0] == "Qwen/Qwen3.5-9B"
    assert [w.text for w, _ in flags.dropped] == ["--enable-multimodal", "--connector", "--no-omni"]
    assert flags.settings["port"][0] == 8100 and not flags.extra


def test_the_graphs_own_env_comes_first_in_every_component_and_a_components_own_entry_wins():
    """v1beta1 `spec.env` and v1alpha1 `spec.envs`: the operator puts the graph's environment
    before each component's own; an entry of the same name in the component takes precedence."""
    path = FIELD / "dynamo" / "nemotron3-ultra-h200-disagg-1p2d-graph-env-v1beta1.yaml"
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("model", "path")) == "/opt/models/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
    assert imp.get(("model", "served_name")) == "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
    for role in ("prefill", "decode"):
        env = imp.get((role, "env"))
        assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS" and env["UCX_TLS"] == "rc_x,rc,cuda_copy,cuda_ipc"
    v1alpha1 = """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: g}
spec:
  envs:
    - {name: VLLM_SSM_CONV_STATE_LAYOUT, value: DS}
    - {name: UCX_TLS, value: all}
  services:
    Frontend: {componentType: frontend, extraPodSpec: {mainContainer: {args: [python3 -m dynamo.frontend]}}}
    prefill:
      componentType: worker
      subComponentType: prefill
      envs: [{name: UCX_TLS, value: "rc,cuda_copy"}]
      extraPodSpec:
        mainContainer:
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3.5-35B-A3B-FP8, --disaggregation-mode, prefill]
    decode:
      componentType: worker
      subComponentType: decode
      extraPodSpec:
        mainContainer:
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3.5-35B-A3B-FP8, --disaggregation-mode, decode]
"""
    imp = import_text(v1alpha1, "graph.yaml")
    assert imp.get(("prefill", "env")) == {"VLLM_SSM_CONV_STATE_LAYOUT": "DS", "UCX_TLS": "rc,cuda_copy"}
    assert imp.get(("decode", "env")) == {"VLLM_SSM_CONV_STATE_LAYOUT": "DS", "UCX_TLS": "all"}


def test_lc_script_takes_the_model_from_the_container_env_and_the_image_placeholder_is_unresolved():
    path = FIELD / "dynamo" / "qwen35-397b-fp8-h100-1p3d-lc-envsubst.yaml"
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("model", "path")) == "Qwen/Qwen3.5-397B-A17B-FP8"
    assert imp.get(("decode", "endpoints")) == 3
    assert imp.get(("kv_transfer", "backends")) == ["LIBFABRIC"]
    found = _findings(path)
    assert ("IMP001", "info", "engine.image") in [f[:3] for f in found]
    assert not [f for f in found if f[1] == "error"]


def test_variables_that_repeat_each_other_are_refused_before_they_fill_memory():
    """Ten lines of `B=$A$A...` (each ten times the last) in a script, or `$(VAR)` chains in a
    container's env: gigabytes expanded; refused at a bound instead (an OOM kill before)."""
    chain = ["A=xxxxxxxxxx"] + [f"{b}=" + f"${a}" * 10 for a, b in zip("ABCDEFGHI", "BCDEFGHIJ", strict=True)]
    script = "\n".join(chain) + "\nvllm serve m --served-model-name \"$J\" --kv-transfer-config '{}'\n"
    with pytest.raises(NotImportable, match=r"^bomb\.sh:6:1: a variable expands to more than"):
        import_text(script, "bomb.sh")  # said where it grew past the bound: line 6, `F=$E$E...`
    env = [{"name": "A", "value": "x" * 10}] + [
        {"name": b, "value": f"$({a})" * 10} for a, b in zip("ABCDEFGHI", "BCDEFGHIJ", strict=True)
    ]
    with pytest.raises(NotImportable, match="expands to more than"):
        values: dict[str, str | None] = {}
        for e in env:  # as dynamo_crd reads a container's env: each entry against those above it
            values[e["name"]] = expand_k8s(e["value"], values).text


# ------------------------------------------------------------------------------ shell variables
def test_shell_expansion_defaults_exports_and_quoting():
    scope = Scope()
    for cmd in shell_words("A=1\nexport B=${A:-9}x\nC=${UNSET:-dflt}\nD='$A'\n"):
        assert read_assignments(cmd, scope)
    assert scope.values == {"A": "1", "B": "1x", "C": "dflt", "D": "$A"}
    assert scope.exported == {"B"}
    e = expand("--port $NOPE", scope)
    assert e.text == "--port $NOPE" and e.unresolved == ["$NOPE"]


def test_a_default_word_holds_references_of_its_own():
    """`${A:-${B}/x}`: bash expands the default word, references and all. The first `}` had closed
    the outer reference, and an imported model path read `${BASE/Qwen3.5-9B}` (a pattern
    substitution bash would have made of it), a --max-model-len `${DEFAULT_LEN:-8192}`."""
    scope = Scope()
    script = (
        "BASE=/models\nMODEL=${MODEL_DIR:-${BASE}/Qwen3.5-9B}\nLEN=${LEN:-${DEFAULT:-${X:-8192}}}\nQ='${A:-${B}}'\n"
    )
    for cmd in shell_words(script):
        assert read_assignments(cmd, scope)
    assert scope.values["MODEL"] == "/models/Qwen3.5-9B" and scope.values["LEN"] == "8192"
    assert scope.values["Q"] == "${A:-${B}}"  # quoted: text
    scope.values["MODEL_DIR"] = "/mine"
    assert expand("${MODEL_DIR:-${BASE}/q}", scope).text == "/mine"  # set: the default is not read
    e = expand("${NOPE:-${ALSO_NOPE}/m}x", scope)
    assert e.text == "${ALSO_NOPE}/mx" and e.unresolved == ["${ALSO_NOPE}"]
    unclosed = expand("--model ${MP:-${BASE}/m", scope)  # a brace never closed: bash refuses it
    assert unclosed.text == "--model ${MP:-${BASE}/m" and unclosed.unresolved == ["${MP:-${BASE}/m"]
    for deep in (65, 100):
        with pytest.raises(NotImportable, match="nested more than 64 deep"):
            expand("${X:-" * deep + "m" + "}" * deep, scope)
    assert expand("${X:-" * 64 + "m" + "}" * 64, scope).text == "m"


def test_long_words_of_references_and_unclosed_braces_expand_in_linear_time():
    """30,000 `${` never closed had each been scanned to the end of the text (a 60 KB script took
    47 s to import); and every reference had looked through every quoted `$`. Counted, not timed:
    the matching is one pass, so a doubled input doubles the braces looked at."""
    from recipectl.formats import shellvars

    looked: list[int] = []
    real = shellvars._closing_braces

    def counting(text, quoted):
        looked.append(len(text))
        return real(text, quoted)

    scope = Scope({"A": "1"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shellvars, "_closing_braces", counting)
        e = expand("${" * 30000, scope)
        assert e.unresolved == ["${" * 30000] and looked == [60000]
        looked.clear()
        text = "${A}" * 8000 + "$" * 8000
        assert expand(text, scope, tuple(range(32000, 40000))).text == "1" * 8000 + "$" * 8000
        assert looked == [len(text)]  # the references hold no braces of their own: one pass in all


SCRIPT = """#!/bin/bash
KV='{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
export VLLM_SSM_CONV_STATE_LAYOUT=DS
MODEL=${MODEL:-Qwen/Qwen3.5-35B-A3B-FP8}
EXTRA=(--max-model-len 8192)
read -r -a MORE < extra-args.txt
vllm serve $MODEL --port $PREFILL_PORT --tensor-parallel-size 2 --kv-transfer-config "$KV" "${EXTRA[@]}" "${MORE[@]}" &
vllm serve "$MODEL" --port 8200 --tensor-parallel-size 2 \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
"""


def test_script_variables_resolve_and_what_does_not_is_a_finding(tmp_path):
    """An assignment, an export, a default, an array written out (read), and two things known only
    when the script runs: a port (said, never called a value the engine would refuse) and an array
    read from a file (said, its flags unread)."""
    path = tmp_path / "pd.sh"
    path.write_text(SCRIPT)
    imp = import_text(SCRIPT, str(path))
    assert imp.get(("model", "path")) == "Qwen/Qwen3.5-35B-A3B-FP8"
    assert imp.get(("model", "family")) == "hybrid"
    assert imp.get(("prefill", "kv_role")) == "kv_producer"
    assert imp.get(("prefill", "env", "VLLM_SSM_CONV_STATE_LAYOUT")) == "DS"
    found = _findings(path)
    codes = {(c, s, p) for c, s, p, _ in found}
    assert ("IMP001", "info", "prefill.extra_args.1") in codes  # `--port $PREFILL_PORT`
    assert imp.get(("prefill", "max_model_len")) == 8192  # "${EXTRA[@]}"
    assert ("IMP001", "info", "prefill.extra_args.2") in codes  # "${MORE[@]}"
    assert not [f for f in found if f[0] in ("ARG002", "ARG003")]
    assert ("VER001", "warning", "decode.async_scheduling") in codes  # the hybrid rules ran


def test_an_unresolved_model_is_a_warning_that_says_the_model_rules_did_not_run(tmp_path):
    path = tmp_path / "pd.sh"
    path.write_text(SCRIPT.replace("MODEL=${MODEL:-Qwen/Qwen3.5-35B-A3B-FP8}\n", ""))
    found = _findings(path)
    imp001 = [f for f in found if f[0] == "IMP001" and f[2] == "model.path"]
    assert imp001 and imp001[0][1] == "warning"
    assert imp001[0][3] == "`model.path` is set at deploy time (`$MODEL`): rules that need the model did not run"


# ----------------------------------------------------------------------------- srt-slurm sa-bench
def _srt(tmp_path, bench: str) -> Path:
    base = (FIELD / "srt-slurm" / "qwen35-397b-gb200-4xdep2-1xdep8.yaml").read_text()
    text = base[: base.index("benchmark:")] + bench
    path = tmp_path / "srt.yaml"
    path.write_text(text)
    return path


def test_srtctls_rpc_port_goes_to_a_dp_endpoint_over_nodes_and_not_to_tp_over_nodes(tmp_path):
    """srtctl allocates --data-parallel-rpc-port for a data-parallel endpoint that spans nodes; a
    TP8 decode over two 4-GPU nodes (DP 1) gets none."""
    path = FIELD / "srt-slurm" / "qwen35-397b-gb200-4xdep2-1xdep8.yaml"
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("decode", "data_parallel_rpc_port")) == 8400  # DEP8 over two 4-GPU nodes
    tp8 = tmp_path / "tp8.yaml"
    decode = path.read_text().split("    decode:\n", 1)
    tp8.write_text(
        decode[0]
        + "    decode:\n"
        + decode[1]
        .replace("      tensor-parallel-size: 1\n", "      tensor-parallel-size: 8\n", 1)
        .replace("      data-parallel-size: 8\n", "      data-parallel-size: 1\n", 1)
        .replace("      enable-expert-parallel: true\n", "", 1)
    )
    imp = import_text(tp8.read_text(), str(tp8))
    assert imp.get(("decode", "parallel")) == {"tp": 8, "dp": 1}
    assert imp.get(("decode", "data_parallel_rpc_port")) is None


DSV4 = FIELD / "srt-slurm" / "deepseek-v4-pro-gb200-1p4d-dep8-tp8-offload.yaml"


def test_the_model_is_identity_model_repo_where_model_path_is_a_directory_on_the_cluster(tmp_path):
    """srtctl resolves `model.path: deepseekv4-fp4` through its srtslurm.yaml to a directory it
    mounts at /model; the recipe's identity names the checkpoint (identity.model.repo): that is
    the model, its findings point at that line, and the alias and the revision are listed as not
    carried."""
    text = DSV4.read_text()
    imp = import_text(text, str(DSV4))
    assert imp.get(("model", "path")) == "deepseek-ai/DeepSeek-V4-Pro"
    dropped = {d.what: d.why for d in imp.dropped}
    assert "identity.model.repo" in dropped["model.path: deepseekv4-fp4"]
    assert "--revision" in dropped["identity.model.revision: 0366e4e064385807ea86b088a5c6c878ff23343b"]
    repo_line = text[: text.index('    repo: "deepseek-ai/DeepSeek-V4-Pro"')].count("\n") + 1
    report, _ = validate_file(DSV4)
    (model,) = [d for d in report.diagnostics if d.path == "model.path"]
    assert "deepseek-ai/DeepSeek-V4-Pro" in model.message and model.line == repo_line, model
    # `hf:` is what the engine loads: it stays the model whatever the identity says
    hf = tmp_path / "hf.yaml"
    hf.write_text(edited(text, ('  path: "deepseekv4-fp4"', '  path: "hf:deepseek-ai/DeepSeek-V4-Flash"')))
    assert import_text(hf.read_text(), str(hf)).get(("model", "path")) == "deepseek-ai/DeepSeek-V4-Flash"
    # without an identity the directory is all the recipe says
    bare = tmp_path / "bare.yaml"
    bare.write_text(edited(text, ('    repo: "deepseek-ai/DeepSeek-V4-Pro"\n', "")))
    assert import_text(bare.read_text(), str(bare)).get(("model", "path")) == "deepseekv4-fp4"


def test_sa_bench_fixed_lengths_are_ratio_one(tmp_path):
    path = _srt(
        tmp_path,
        "benchmark:\n  type: sa-bench\n  isl: 8192\n  osl: 1024\n  concurrencies: '64'\n  random_range_ratio: 1.0\n",
    )
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("workload",)) == {"isl": 8192, "osl": 1024, "random_range_ratio": 0.0, "concurrency": [64]}


def test_sa_bench_lengths_lie_in_ratio_times_isl_to_isl(tmp_path):
    """0.8: sa-bench's longest request is ISL itself (8192), not vLLM's ISL x 1.8."""
    from recipectl.schema import WorkloadSection

    path = _srt(
        tmp_path,
        "benchmark:\n  type: sa-bench\n  isl: 8192\n  osl: 1024\n  concurrencies: '64'\n"
        "  random_range_ratio: 0.8\n  repeat: 2\n  num_warmup_mult: 1\n",
    )
    imp = import_text(path.read_text(), str(path))
    w = WorkloadSection.model_validate(imp.get(("workload",)))
    assert (w.max_isl, w.max_osl) == (8192, 1024)
    assert round(w.isl * (1 - w.random_range_ratio)) == round(0.8 * 8192)
    dropped = {d.what.split(":")[0] for d in imp.dropped}
    assert {"benchmark.repeat", "benchmark.num_warmup_mult"} <= dropped


def test_an_accuracy_run_gets_no_invented_workload(tmp_path):
    path = _srt(tmp_path, "benchmark:\n  type: gsm8k\n  repeat: 5\n")
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("workload",)) is None
    assert imp.get(("checks", "gsm8k", "enabled")) is True
    assert any(d.what.startswith("benchmark.repeat") for d in imp.dropped)
    assert not [f for f in _findings(path) if f[2].startswith("workload")]


# ----------------------------------------------------------------------------- other backends
@pytest.mark.parametrize(
    "name,backend",
    [
        ("srt-slurm-sglang-qwen35-1p1d.yaml", "sglang"),
        ("srt-slurm-trtllm-typed.yaml", "trtllm"),
        ("dynamo-sglang-v1beta1.yaml", "sglang"),
        ("dynamo-trtllm-worker.yaml", "trtllm"),
    ],
)
@pytest.mark.parametrize("command", [["validate"], ["plan"], ["render", "-t", "bash", "-o", "{tmp}"], ["import"]])
def test_other_backends_are_refused_in_one_line(name, backend, command, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path / "out")) for a in command]
    r = _recipectl(*args, str((OTHER / name).relative_to(ROOT)))
    assert r.returncode == 2, r.stdout + r.stderr
    said = [line for line in (r.stdout + r.stderr).splitlines() if f"backend {backend}" in line]
    assert len(said) == 1 and said[0].endswith(f"backend {backend}: recipectl checks vLLM deployments")
    assert "SCH001" not in r.stdout + r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- hybrid-ness
def _serve_pair(model: str) -> str:
    kv = '{"kv_connector":"NixlConnector","kv_role":"kv_%s"}'
    return "".join(
        f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve {model} --port {port} --kv-transfer-config '{kv % role}' &\n"
        for port, role in ((8100, "producer"), (8200, "consumer"))
    )


def test_hybrid_from_the_architecture_under_any_name(tmp_path):
    """A Mamba2 hybrid under a name recipectl has never seen: its config.json says."""
    model = tmp_path / "house-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["GraniteMoeHybridForCausalLM"]}))
    path = tmp_path / "pd.sh"
    path.write_text(_serve_pair(str(model)))
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("model", "family")) == "hybrid"
    assert "config.json" in imp.origins[("model", "family")].note
    assert "VER001" in {f[0] for f in _findings(path)}


def test_granite_4_h_is_hybrid_by_its_published_architecture(tmp_path):
    path = tmp_path / "pd.sh"
    path.write_text(_serve_pair("ibm-granite/granite-4.0-h-tiny"))
    imp = import_text(path.read_text(), str(path))
    assert imp.get(("model", "family")) == "hybrid"
    assert "GraniteMoeHybridForCausalLM" in imp.origins[("model", "family")].note


def test_an_unknown_model_is_said_so(tmp_path):
    path = tmp_path / "pd.sh"
    path.write_text(_serve_pair("my-org/house-model"))
    found = _findings(path)
    assert ("IMP002", "info", "model.path") in [f[:3] for f in found]


# --------------------------------------------------------------------- severity and evidence
def test_fp8_kv_on_nvfp4_is_an_error_only_on_the_397b_the_evidence_is_about():
    on_122b = _findings(FIELD / "dynamo" / "qwen35-122b-nvfp4-b200-disagg-1p2d-v1beta1.yaml")
    on_397b = _findings(FIELD / "srt-slurm" / "known-bad-fp8-kv-cache-nvfp4.yaml")
    assert {f[1] for f in on_122b if f[0] == "HYB006"} == {"warning"}
    assert {f[1] for f in on_397b if f[0] == "HYB006"} == {"error"}


def test_a_float16_ssm_cache_is_reported_once():
    found = _findings(FIELD / "dynamo" / "qwen35-122b-fp8-h200-disagg-1p2d-v1beta1.yaml")
    on_line = [f[0] for f in found if f[2] == "decode.mamba_ssm_cache_dtype"]
    assert on_line == ["HYB007"]


def test_render_leaves_the_load_failure_policy_to_vllm_unless_the_recipe_sets_it(tmp_path):
    from recipectl.loader import load_text
    from recipectl.render.processes import kv_transfer_json

    text = (ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml").read_text()
    unset = load_text(text, "r.yaml", base_dir=ROOT / "recipes" / "local").recipes[0].recipe
    assert "kv_load_failure_policy" not in json.loads(kv_transfer_json(unset, "decode"))
    assert "load_failure_policy" not in text
    stated = text.replace("kv_transfer:\n", "kv_transfer:\n  load_failure_policy: fail\n", 1)
    assert stated != text
    set_ = load_text(stated, "r.yaml", base_dir=ROOT / "recipes" / "local").recipes[0].recipe
    assert json.loads(kv_transfer_json(set_, "decode"))["kv_load_failure_policy"] == "fail"


def test_heterogeneous_tp_on_an_unknown_version_is_a_warning():
    """vLLM's own CI runs a TP1 prefill with a TP2 decode on Qwen3.5 at its head."""
    found = _findings(FIELD / "vllm-serve" / "vllm-ci-hybrid-ssm-qwen35-0.8b-p-tp1-d-tp2.sh")
    assert {f[1] for f in found if f[0] == "CON001"} == {"warning"}
    bad = _findings(FIELD / "vllm-serve" / "known-bad-heterogeneous-tp.sh")  # vLLM 0.22.0
    assert {f[1] for f in bad if f[0] == "CON001"} == {"error"}


def test_replicas_set_at_deploy_time_are_listed(tmp_path):
    text = (FIELD / "dynamo" / "qwen35-397b-fp8-h100-1p3d-lc-envsubst.yaml").read_text()
    text = text.replace("      replicas: 3\n", "      replicas: ${NUM_DECODE_REPLICAS}\n")
    imp = import_text(text, str(tmp_path / "d.yaml"))
    assert imp.get(("decode", "endpoints")) == 1
    assert any(d.what == "replicas: ${NUM_DECODE_REPLICAS}" for d in imp.dropped)


ARRAY_SCRIPT = """#!/bin/bash
MODEL=Qwen/Qwen3.5-9B
COMMON=(
  --max-model-len 8192   # the seed's context
  --kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'
)
PREFILL_ARGS=("${COMMON[@]}" --port 8100)
PREFILL_ARGS+=(--max-num-batched-tokens 16384)
CUDA_VISIBLE_DEVICES=0 vllm serve $MODEL "${PREFILL_ARGS[@]}" &
CUDA_VISIBLE_DEVICES=1 vllm serve $MODEL "${COMMON[@]}" --port 8200 &
"""


def test_an_array_written_out_gives_its_flags_each_from_the_line_that_wrote_it(tmp_path):
    """`ARGS=(...)` over several lines, built from another array and appended to, then used as
    `"${ARGS[@]}"`: peers' launch scripts keep shared flags so. The multi-line array had been read
    as commands of its own: the import was refused for want of --kv-transfer-config."""
    path = tmp_path / "pd.sh"
    path.write_text(ARRAY_SCRIPT)
    imp = import_text(ARRAY_SCRIPT, str(path))
    assert imp.get(("prefill", "max_model_len")) == imp.get(("decode", "max_model_len")) == 8192
    assert imp.get(("prefill", "max_num_batched_tokens")) == 16384
    assert (imp.get(("prefill", "port")), imp.get(("decode", "port"))) == (8100, 8200)
    assert imp.get(("kv_transfer", "connector")) == "NixlConnector"
    assert (imp.origins[("prefill", "max_model_len")].line, imp.origins[("prefill", "max_model_len")].col) == (4, 3)
    assert imp.origins[("prefill", "max_num_batched_tokens")].line == 8
    assert not [f for f in _findings(path) if f[0] == "IMP001"]


def test_array_items_quoting_appends_and_what_stays_unread():
    scope = Scope()
    script = (
        "A=(x 'p q')\nA+=(z)\ndeclare -a D=(1 2)\nB=(\"${A[@]}\" w)\nread -a R\nC=(x $UNSET)\n"
        "S=a\nS+=b\nT+=x\nE=(1)\nE=one\n"
    )
    for cmd in shell_words(script):
        assert read_assignments(cmd, scope), cmd

    def words(line: str) -> list[str]:
        (cmd,) = shell_words(line)
        return [w.text for w in expand_words(cmd, scope)]

    assert words('cmd "${A[@]}"') == ["cmd", "x", "p q", "z"]
    assert words("cmd ${A[@]}") == ["cmd", "x", "p", "q", "z"]  # unquoted: split at blanks, as bash does
    assert words('"${B[@]}" "${D[@]}"') == ["x", "p q", "z", "w", "1", "2"]
    joined = ["--served-model-name", "x p q z w", "x", "p", "q", "z", "w"]  # "${B[*]}": one word
    assert words('--served-model-name "${B[*]}" ${B[*]}') == joined
    # known only when the script runs, or a use of an array other than all of it: as written
    assert words('"${R[@]}" "${C[@]}" "${A[1]}" x"${A[@]}" \'${A[@]}\'') == [
        "${R[@]}",
        "${C[@]}",
        "${A[1]}",
        "x${A[@]}",
        "${A[@]}",
    ]
    assert scope.values["S"] == "ab" and "T" not in scope.values
    # a string into an array sets its first item (bash: E=(one)): the array said, not read
    assert "E" in scope.arrays and "E" not in scope.items and "E" not in scope.values


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12), max_size=8))
def test_any_items_quoted_into_an_array_come_back_as_written(items):
    scope = Scope()
    for cmd in shell_words("ARGS=(\n" + "\n".join(shlex.quote(i) for i in items) + "\n)"):
        assert read_assignments(cmd, scope)
    (cmd,) = shell_words('vllm serve "${ARGS[@]}"')
    assert [w.text for w in expand_words(cmd, scope)] == ["vllm", "serve", *items]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab=()+ $\"'{}[]@*\n#\\;&|", max_size=80))
def test_any_text_of_arrays_is_read_without_raising(text):
    """Read, or refused as a script bash refuses (an array never closed); nothing else raised."""
    scope = Scope()
    try:
        for cmd in shell_words(text):
            if not read_assignments(cmd, scope):
                expand_words(cmd, scope)
    except NotImportable as e:
        assert "never closed" in e.message, e


@pytest.mark.parametrize(
    ("written", "bash_gives"),
    [
        ("${A:-'}'x}", "}x"),
        ("${A:-\\}x}", "}x"),
        ("${A:-a}'}'", "a}"),
        ("${A:-'{'}", "{"),
        ("'${A}'", "${A}"),
        ('"${B}"', "b"),
    ],
)
def test_a_quoted_brace_is_text_and_never_ends_a_reference(written, bash_gives):
    """`${A:-'}'x}`: the quoted `}` is part of the default word, as bash reads it (its own output
    restated here); it had closed the reference, giving `x}`."""
    (cmd,) = shell_words(written)
    assert [w.text for w in expand_words(cmd, Scope({"B": "b"}))] == [bash_gives]
    if shutil.which("bash"):
        ran = subprocess.run(["bash", "-c", f"unset A; B=b; printf %s {written}"], capture_output=True, text=True)
        assert ran.stdout == bash_gives


@pytest.mark.parametrize(
    ("script", "where"),
    [
        ("A=1\nvllm serve m --port " + "${X:-" * 70 + "1" + "}" * 70 + "\n", "deep.sh:2:21: references nested"),
        ("A=x\n" + "A+=$A$A$A$A\n" * 20 + "vllm serve $A\n", "deep.sh:9:1: a variable expands"),
    ],
)
def test_an_expansion_refused_is_said_at_its_file_line_and_column(recipectl_in_process, tmp_path, script, where):
    """`import`'s exit 2 names the word that would not expand, as a compiler names a line, where
    it had named no place at all."""
    path = tmp_path / "deep.sh"
    path.write_text(script)
    code, out, err = recipectl_in_process("import", str(path))
    assert code == 2 and where in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("script", "where"),
    [
        ("A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 40 + "vllm serve m\n", "bomb.sh:14:1: an array grows past 4,096"),
        ("A=(" + "x " * 3000 + ")\nvllm serve m " + '"${A[@]}" ' * 2 + "\n", "bomb.sh:2:24: a command grows past"),
    ],
)
def test_arrays_that_repeat_each_other_are_refused_at_a_bound(script, where):
    """Doubling an array forty times would be 2**40 items: refused at its line once past 4,096."""
    with pytest.raises(NotImportable) as caught:
        import_text(script, "bomb.sh")
    assert str(caught.value).startswith(where), caught.value


@pytest.mark.parametrize(
    ("script", "bash_gives"),
    [
        ("A=(x y)\nA=$UNKNOWN\n", None),  # bash: <><y>; the first item is the environment's
        ("A=(x y)\nread A\n", None),
        ("A=(x y)\nA+=z\n", None),  # bash: <xz><y>
        ("A=(x y)\nA=$(cat extra.txt)\n", None),
        ('S="--tp 8"\nA=$S\nA+=(--pp 2)\n', ["--tp 8", "--pp", "2"]),
        ("A+=(--pp 2)\n", None),  # appended to what the environment holds
        ("A=(x y)\nA=(z)\n", ["z"]),
    ],
)
def test_an_array_given_a_value_the_file_does_not_hold_is_said_never_its_old_items(script, bash_gives):
    """`P=(--tensor-parallel-size 4); P=$(cat extra.txt)`: the old items had stayed and were read
    as tp 4. A string into an array changes its first item; known only when the script runs, the
    array is said (IMP001), as bash's own output below would not be known either."""
    scope = Scope()
    for cmd in shell_words(script):
        assert read_assignments(cmd, scope)
    (cmd,) = shell_words('vllm serve "${A[@]}"')
    got = [w.text for w in expand_words(cmd, scope)][2:]
    assert got == (["${A[@]}"] if bash_gives is None else bash_gives)
    if bash_gives is not None and shutil.which("bash"):
        ran = subprocess.run(["bash", "-c", script + 'printf "%s\\n" "${A[@]}"'], capture_output=True, text=True)
        assert ran.stdout.splitlines() == bash_gives


@pytest.mark.parametrize(
    ("script", "said"),
    [
        # an array of 4,096 items spliced unquoted 60,000 times into another: 245 million words
        ("A=(" + "x " * 4096 + ")\nB=(" + "${A[@]} " * 60000 + ")\nvllm serve m\n", "an array grows past 4,096 items"),
        # 5,000 arrays of 4,096 items each: 20 million words, each under the bound
        ("A=(" + "x " * 4096 + ")\n" + "B=(${A[@]})\n" * 5000 + "vllm serve m\n", "arrays give more than 262,144"),
        # an array of 4,096 copies of a variable of 256 K characters: 1 GB, under the item bound
        ("X=x\n" + "X=$X$X\n" * 18 + "A=(" + '"$X" ' * 4096 + ")\nvllm serve m\n", "more than 67,108,864 characters"),
        # 20,000 variables, each a copy of one of 256 K characters: 5 GB
        ("X=x\n" + "X=$X$X\n" * 18 + "Y=$X\n" * 20000 + "vllm serve m\n", "more than 67,108,864 characters"),
        # a variable of 256 K characters used 20,000 times in one command: 5 GB
        (
            "X=x\n" + "X=$X$X\n" * 18 + "vllm serve m " + "$X " * 20000 + "\n",
            "a command's words expand to more than 4,194,304",
        ),
    ],
)
def test_words_that_would_fill_memory_are_refused_before_they_are_made(script, said):
    """A review's scripts of 20-500 KB: the bound had been checked once the words were made (3 GB
    at the cap and "this is a bug in recipectl"; 42 s for the 5,000 arrays). Refused by the bound
    each one meets first, by its own message."""
    with pytest.raises(NotImportable, match=said):
        import_text(script, "bomb.sh")


def test_an_export_appending_to_the_environment_keeps_the_environment_and_no_array_is_exported(tmp_path):
    """`export LD_LIBRARY_PATH+=":/opt/nixl/lib"` had been written as ":/opt/nixl/lib" alone,
    dropping what the server inherits; `GPUS=(0 1); export GPUS` as the text "(0 1)", where bash
    exports no array."""
    extra = 'export LD_LIBRARY_PATH+=":/opt/nixl/lib"\nGPUS=(0 1)\nexport GPUS\n'
    script = ARRAY_SCRIPT.replace("MODEL=Qwen/Qwen3.5-9B\n", "MODEL=Qwen/Qwen3.5-9B\n" + extra)
    imp = import_text(script, str(tmp_path / "pd.sh"))
    assert imp.get(("prefill", "env", "LD_LIBRARY_PATH")) == "${LD_LIBRARY_PATH}:/opt/nixl/lib"
    assert imp.get(("prefill", "env", "GPUS")) is None


DYNAMO_ARRAY = """apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: g}
spec:
  services:
    Frontend: {componentType: frontend, extraPodSpec: {mainContainer: {args: [python3 -m dynamo.frontend]}}}
    prefill:
      componentType: worker
      subComponentType: prefill
      envs: [{name: MODEL, value: Qwen/Qwen3-8B}, {name: TP, value: "2"}]
      extraPodSpec:
        mainContainer:
          command: [bash, -c]
          args:
            - |
              ARGS=(--model $(MODEL)
                    --tensor-parallel-size "$(TP)")
              python3 -m dynamo.vllm "${ARGS[@]}" --disaggregation-mode prefill
    decode:
      componentType: worker
      subComponentType: decode
      envs: [{name: MODEL, value: Qwen/Qwen3-8B}, {name: TP, value: "2"}]
      extraPodSpec:
        mainContainer:
          command: [bash, -c]
          args:
            - |
              python3 -m dynamo.vllm --model $(MODEL) --tensor-parallel-size "$(TP)" --disaggregation-mode decode
"""


def test_kubernetes_variables_in_an_arrays_items_are_the_containers(tmp_path):
    """Kubernetes replaces `$(VAR)` in a container's args before bash runs them, inside an array
    too: prefill's tp had been lost and its model said unresolved, where decode's same flags read."""
    imp = import_text(DYNAMO_ARRAY, str(tmp_path / "g.yaml"))
    assert imp.get(("model", "path")) == "Qwen/Qwen3-8B"
    assert imp.get(("prefill", "parallel", "tp")) == imp.get(("decode", "parallel", "tp")) == 2


def test_an_array_never_closed_is_refused_at_its_line(tmp_path):
    """`EXTRA=(--enforce-eager` with no `)`: bash refuses the script. Its items had run on into the
    next server's words, and the import had said "only prefill here" of a script with both."""
    script = ARRAY_SCRIPT.replace("PREFILL_ARGS+=(--max-num-batched-tokens 16384)", "EXTRA=(--enforce-eager")
    with pytest.raises(NotImportable, match=r"^pd\.sh:8:1: the array EXTRA's `\(` is never closed"):
        import_text(script, "pd.sh")
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", "-c", script], capture_output=True).returncode != 0
