"""Peer-format files recipectl reads (srt-slurm, Dynamo, vllm serve scripts) end in a report,
never an internal error, whatever a value's type, nesting or size.

The type mutator: every srt-slurm recipe and Dynamo manifest of the field corpus (tests/field/),
every position in it (a scalar, a mapping or a list, at any depth) replaced in the file's text by
a value of another type: a word, a number, a list, a mapping, null, a boolean, a huge number,
'nan'. The loader must answer each with a report, and `recipectl validate`, `plan`,
`render -t bash` and `import` must end with exit 0, 1 or 2 (never 3, never a traceback), each in
at most CPU_LIMIT_S of CPU. Run in-process (conftest's recipectl_in_process) so that thousands
fit: CI runs a seeded sample (LOADER_CASES through the loader, CLI_CASES through the four
commands, about a minute on 2 cores); RECIPECTL_FUZZ_FULL=1 runs every case (and
RECIPECTL_FUZZ_SEED picks another sample).
"""

from __future__ import annotations

import json
import os
import random
import resource
import time
from pathlib import Path

import pytest
import yaml

from recipectl.loader import load_text

FIELD = Path(__file__).parent / "field"
PEER_FILES = sorted((FIELD / "srt-slurm").glob("*.yaml")) + sorted((FIELD / "dynamo").glob("*.yaml"))
FULL = os.environ.get("RECIPECTL_FUZZ_FULL") == "1"
SEED = os.environ.get("RECIPECTL_FUZZ_SEED", "peer-types-1")
LOADER_CASES = 2500  # of about 8,000; each a few ms
CLI_CASES = 200  # x 4 commands; each case about 0.1-0.25 s of CPU
CPU_LIMIT_S = 2.0  # per command, in-process (no interpreter start-up)
MEMORY_LIMIT_MB = 500  # growth of this process over a whole run
MUTATIONS = ["word", 7, [1, 2], {"a": 1}, None, True, 10**30, "nan"]


def _positions(text: str):
    """(path, start, end) of every value in the file's documents (a Dynamo file holds its ConfigMaps
    too): its text span; the path starts with the document's index."""
    out = []

    def walk(node, path):
        out.append((path, node.start_mark.index, node.end_mark.index))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                walk(value, (*path, i))

    for i, document in enumerate(yaml.compose_all(text)):
        walk(document, (i,))
    return [p for p in out if len(p[0]) > 1]


def mutated(text: str, values: list = MUTATIONS):
    """Every (path, new value, mutated text): the value's span replaced by the new one in flow
    style (JSON is YAML), the rest of the file (comments, block scripts) left as it is."""
    for path, start, end in _positions(text):
        tail = "\n" if text[start:end].endswith("\n") else ""
        for value in values:
            yield path, value, text[:start] + json.dumps(value) + tail + text[end:]


def _cases() -> list[tuple[str, tuple, object, str]]:
    return [
        (f.relative_to(FIELD).as_posix(), path, value, text)
        for f in PEER_FILES
        for path, value, text in mutated(f.read_text())
    ]


ALL_CASES = _cases()


def _sample(n: int, salt: str) -> list:
    if FULL:
        return ALL_CASES
    return random.Random(f"{SEED}-{salt}").sample(ALL_CASES, min(n, len(ALL_CASES)))


def test_the_mutator_reaches_every_kind_of_position():
    assert len(PEER_FILES) >= 15 and len(ALL_CASES) > 5000
    paths = {(name, path) for name, path, _, _ in ALL_CASES}
    for name, path in (
        ("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8.yaml", (0, "resources", "prefill_nodes")),
        ("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8.yaml", (0, "backend", "vllm_config")),
        (
            "dynamo/qwen35-397b-fp8-h100-disagg.yaml",
            (0, "spec", "services", "VllmDecodeWorker", "extraPodSpec", "mainContainer", "args", 0),
        ),
    ):
        assert (name, path) in paths, (name, path)


def _case_id(case) -> str:
    name, path, value, _ = case
    return f"{name} {'.'.join(map(str, path))} = {json.dumps(value)}"


def test_type_mutations_load_as_reports():
    """The loader (what every command reads a file through) answers each mutation with a
    report: a recipe, or findings with a code, a message and a line."""
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slowest = (0.0, "")
    for case in _sample(LOADER_CASES, "loader"):
        name, _, _, text = case
        t0 = time.process_time()
        try:
            result = load_text(text, "m.yaml", base_dir=FIELD / name.split("/")[0])
        except Exception as e:  # the point of the test
            raise AssertionError(f"{_case_id(case)} raised {type(e).__name__}: {e}") from e
        slowest = max(slowest, (time.process_time() - t0, _case_id(case)))
        assert result.ok or result.diagnostics, _case_id(case)
        for d in result.diagnostics:
            assert d.code and d.message, (_case_id(case), d)
            if d.code == "SCH001":  # a value of the wrong type: named, at its line
                assert d.path and d.line, (_case_id(case), d)
    assert slowest[0] < CPU_LIMIT_S, slowest
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024 < MEMORY_LIMIT_MB


def test_type_mutations_through_the_commands(recipectl_in_process, tmp_path):
    """validate, plan, render -t bash and import on each mutated file: exit 0, 1 or 2, no
    traceback, each within the CPU bound."""
    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    slowest = (0.0, "")
    for n, case in enumerate(_sample(CLI_CASES, "cli")):
        name, _, _, text = case
        path = tmp_path / f"{n}-{Path(name).name}"
        path.write_text(text)
        for argv in (
            ["validate", str(path)],
            ["plan", str(path)],
            ["render", str(path), "-t", "bash"],
            ["import", str(path)],
        ):
            t0 = time.process_time()
            code, _, err = recipectl_in_process(*argv)
            cpu = time.process_time() - t0
            assert code in (0, 1, 2), (_case_id(case), argv[0], code, err)
            assert "Traceback" not in err and "internal error" not in err, (_case_id(case), argv[0], err)
            slowest = max(slowest, (cpu, f"{argv[0]} {_case_id(case)}"))
        path.unlink()
    assert slowest[0] < CPU_LIMIT_S, slowest
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_rss) / 1024 < MEMORY_LIMIT_MB


# ------------------------------------------------------------------- one value of the wrong type
SRT = FIELD / "srt-slurm" / "qwen35-397b-gb200-4xdep2-1xdep8.yaml"
DYNAMO = FIELD / "dynamo" / "qwen35-397b-fp8-h100-disagg.yaml"
GRAPH_ENV = FIELD / "dynamo" / "nemotron3-ultra-h200-disagg-1p2d-graph-env-v1beta1.yaml"  # v1beta1, spec.env
CONFIG_MAP = FIELD / "dynamo" / "qwen35-122b-fp8-h200-disagg-1p2d-v1beta1.yaml"  # a ConfigMap first
DSV4 = FIELD / "srt-slurm" / "deepseek-v4-pro-gb200-1p4d-dep8-tp8-offload.yaml"


def _line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(
    "src, old, new, field",
    [
        (SRT, "  prefill_nodes: 2", "  prefill_nodes: nan", "resources.prefill_nodes"),
        (SRT, "  gpus_per_decode: 8", "  gpus_per_decode: {a: 1}", "resources.gpus_per_decode"),
        (SRT, "  isl: 8192", "  isl: [1, 2]", "benchmark.isl"),
        (SRT, "  vllm_config:\n    prefill:", "  vllm_config: word\n  unused:\n    prefill:", "backend.vllm_config"),
        (
            DSV4,
            '    repo: "deepseek-ai/DeepSeek-V4-Pro"',
            "    repo: [deepseek-ai, DeepSeek-V4-Pro]",
            "identity.model.repo",
        ),
        (DSV4, "  model:\n    repo:", "  model: word\n  unused:\n    repo:", "identity.model"),
        (
            DYNAMO,
            '  subComponentType: prefill\n      replicas: 1\n      resources:\n        limits:\n          gpu: "8"',
            "  subComponentType: prefill\n      replicas: 1\n      resources:\n        limits:\n          gpu: eight",
            "spec.services.VllmPrefillWorker.resources.limits.gpu",
        ),
        (
            DYNAMO,
            "  subComponentType: prefill\n      replicas: 1",
            "  subComponentType: prefill\n      replicas: true",
            "spec.services.VllmPrefillWorker.replicas",
        ),
        (
            DYNAMO,
            "          args:\n            - |\n              exec python3 -m dynamo.vllm \\\n"
            "                --model Qwen/Qwen3.5-397B-A17B-FP8 \\\n                --disaggregation-mode decode",
            "          args: {a: 1}\n          unused:\n            - |\n              exec python3 -m dynamo.vllm \\\n"
            "                --model Qwen/Qwen3.5-397B-A17B-FP8 \\\n                --disaggregation-mode decode",
            "spec.services.VllmDecodeWorker.extraPodSpec.mainContainer.args",
        ),
        # the environment, at each level the operator reads one: these were skipped (a word's
        # letters read as entries) or were an AttributeError
        (DYNAMO, "  backendFramework: vllm\n", "  backendFramework: vllm\n  envs: word\n", "spec.envs"),
        (DYNAMO, "  backendFramework: vllm\n", "  backendFramework: vllm\n  envs: [7]\n", "spec.envs.0"),
        (
            DYNAMO,
            "  subComponentType: prefill\n",
            "  subComponentType: prefill\n      envs: {a: 1}\n",
            "spec.services.VllmPrefillWorker.envs",
        ),
        (
            DYNAMO,
            "  subComponentType: decode\n",
            "  subComponentType: decode\n      envs: [word]\n",
            "spec.services.VllmDecodeWorker.envs.0",
        ),
        (
            DYNAMO,
            "          image: registry.local/dynamo/vllm-runtime:main-vllm-0.22.0\n          env:\n"
            "            - name: VLLM_SSM_CONV_STATE_LAYOUT\n              value: DS\n          command:\n"
            "            - /bin/bash\n            - -c\n          args:\n            - |\n"
            "              exec python3 -m dynamo.vllm \\\n                --model Qwen/Qwen3.5-397B-A17B-FP8 \\\n"
            "                --disaggregation-mode prefill",
            "          image: registry.local/dynamo/vllm-runtime:main-vllm-0.22.0\n          envFrom: word\n"
            "          env:\n"
            "            - name: VLLM_SSM_CONV_STATE_LAYOUT\n              value: DS\n          command:\n"
            "            - /bin/bash\n            - -c\n          args:\n            - |\n"
            "              exec python3 -m dynamo.vllm \\\n                --model Qwen/Qwen3.5-397B-A17B-FP8 \\\n"
            "                --disaggregation-mode prefill",
            "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.envFrom",
        ),
        (
            GRAPH_ENV,
            "  env:\n    - name: HF_HUB_OFFLINE",
            "  env: word\n  unused:\n    - name: HF_HUB_OFFLINE",
            "spec.env",
        ),
        (GRAPH_ENV, "  env:\n    - name: HF_HUB_OFFLINE", "  env:\n    - 7\n    - name: HF_HUB_OFFLINE", "spec.env.0"),
        (
            GRAPH_ENV,
            "--disaggregation-mode prefill \\\n                    --dyn-tool-call-parser qwen3_coder \\\n"
            "                    --dyn-reasoning-parser nemotron3\n              env:\n"
            "                - name: UCX_TLS\n"
            "                  value: rc_x,rc,cuda_copy,cuda_ipc",
            "--disaggregation-mode prefill \\\n                    --dyn-tool-call-parser qwen3_coder \\\n"
            "                    --dyn-reasoning-parser nemotron3\n              env:\n"
            "                - name: UCX_TLS\n"
            "                  valueFrom: word",
            "spec.components.1.podTemplate.spec.containers.0.env.0.valueFrom",
        ),
        (
            GRAPH_ENV,
            "--disaggregation-mode decode \\\n                    --dyn-tool-call-parser qwen3_coder \\\n"
            "                    --dyn-reasoning-parser nemotron3\n              env:\n",
            "--disaggregation-mode decode \\\n                    --dyn-tool-call-parser qwen3_coder \\\n"
            "                    --dyn-reasoning-parser nemotron3\n              envFrom: [7]\n              env:\n",
            "spec.components.2.podTemplate.spec.containers.0.envFrom.0",
        ),
        (
            CONFIG_MAP,
            "metadata:\n  name: qwen35-122b-disagg-h200-agentic-config",
            "metadata: word\nunused:\n  name: qwen35-122b-disagg-h200-agentic-config",
            "ConfigMap.metadata",
        ),
        (
            CONFIG_MAP,
            "metadata:\n  name: qwen35-122b-disagg-h200-agentic-config",
            "metadata:\n  name: {a: 1}",
            "ConfigMap.metadata.name",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_named_at_its_line(recipectl_in_process, tmp_path, src, old, new, field):
    """Each of these was an internal error (int('nan'), 'str'.get, a dict indexed by 0): now the
    field and its line in the original file, exit 2, from validate and from import."""
    text = src.read_text()
    assert text.count(old) == 1, old
    text = text.replace(old, new)
    path = tmp_path / src.name
    path.write_text(text)
    changed = next(ln for ln in new.split("\n") if ln not in old.split("\n"))  # the mutated value's line
    line = _line_of(text, changed)
    result = load_text(text, str(path))
    assert not result.ok
    d = next(d for d in result.diagnostics if d.path == field)
    assert d.code == "SCH001" and d.line == line, d
    code, out, err = recipectl_in_process("validate", str(path))
    assert code == 2 and f"{path}:{line}:" in out and f"[{field}]" in out, out + err
    code, _, err = recipectl_in_process("import", str(path))
    assert code == 2 and f"{path}:{line}:" in err and field in err and "internal error" not in err, err


# Every value of a v1alpha1 manifest, of a v1beta1 one with the graph's own env, and of a
# ConfigMap, each replaced by a value of each other type: the whole of these, not a sample (the
# sample above had missed a ConfigMap's `metadata: word`, an AttributeError).
WHOLE_TYPES = [None, 7, [1, 2], "word", {"a": 1}]
WHOLE_CASES = [
    (f"{src.name} {'.'.join(map(str, path))} = {json.dumps(value)}", text)
    for src in (DYNAMO, GRAPH_ENV, CONFIG_MAP)
    for path, value, text in mutated(src.read_text(), WHOLE_TYPES)
    if src is not CONFIG_MAP or path[0] == 0  # its ConfigMap document; its graph is like GRAPH_ENV's
]


def test_every_value_of_a_dynamo_manifest_of_another_type_is_imported_or_refused(recipectl_in_process, tmp_path):
    assert len(WHOLE_CASES) > 700
    path = tmp_path / "graph.yaml"
    for case, text in WHOLE_CASES:
        path.write_text(text)
        code, _, err = recipectl_in_process("import", str(path))
        assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (case, code, err)


# ----------------------------------------------------------------------- deep JSON, binary, sizes
DEEP = "[" * 1000 + "]" * 1000


def test_deep_json_in_an_srt_slurm_flag_is_a_finding(recipectl_in_process, tmp_path):
    text = SRT.read_text()
    kv = '{"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_load_failure_policy": "fail"}'
    old = (
        f"      kv-transfer-config: '{kv}'\n      served-model-name: Qwen3.5-397B-A17B-NVFP4\n"
        "      tensor-parallel-size: 1\n      pipeline-parallel-size: 1\n      data-parallel-size: 8"
    )
    assert text.count(old) == 1  # decode's
    path = tmp_path / "deep.yaml"
    path.write_text(text.replace(old, old.replace(kv, DEEP)))
    for argv in (["validate", str(path)], ["plan", str(path)], ["render", str(path), "-t", "bash"]):
        code, _, err = recipectl_in_process(*argv)
        assert code in (0, 1, 2) and "internal error" not in err, (argv, err)
    code, _, err = recipectl_in_process("import", str(path))
    assert code == 0, err
    assert "--kv-transfer-config '[[[[" in err and "nested too deeply (more than 32 levels)" in err, err


@pytest.mark.parametrize("flag", ["--kv-transfer-config", "--speculative-config"])
def test_deep_json_in_a_vllm_serve_script_is_refused(recipectl_in_process, tmp_path, flag):
    script = tmp_path / "pd.sh"
    script.write_text(
        "vllm serve Qwen/Qwen3.5-27B --port 8100 --kv-transfer-config "
        '\'{"kv_connector":"NixlConnector","kv_role":"kv_producer"}\'\n'
        f"vllm serve Qwen/Qwen3.5-27B --port 8200 {flag} '{DEEP}'\n"
    )
    for command in ("validate", "import"):
        code, out, err = recipectl_in_process(command, str(script))
        assert code in (0, 1, 2) and "internal error" not in err and "Traceback" not in err, (command, out, err)
    assert f"{flag} '[[[[" in err and "nested too deeply" in err, err  # import: the flag is not carried


def test_deep_json_in_a_dynamo_argument_is_a_finding(recipectl_in_process, tmp_path):
    text = DYNAMO.read_text()
    old = '--kv-transfer-config \'{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}\''
    assert text.count(old) == 1
    path = tmp_path / "deep.yaml"
    path.write_text(text.replace(old, f"--speculative-config '{DEEP}'"))
    for command in ("validate", "import"):
        code, out, err = recipectl_in_process(command, str(path))
        assert code in (0, 1, 2) and "internal error" not in err, (command, err)
    assert "nested too deeply" in err


PREFILL_SCRIPT = FIELD / "vllm-serve" / "qwen35-27b-gb200-tp1-prefill.sh"


@pytest.mark.parametrize(
    "partner, reason",
    [
        (b"vllm serve \xff\xfe\x00\x01 --port 8200\n", "not UTF-8 text (byte 11)"),
        (b"# " + b"x" * (20 << 20) + b"\n", "larger than 1 MiB"),
    ],
)
def test_an_unreadable_partner_script_is_refused(recipectl_in_process, tmp_path, partner, reason):
    """The decode script paired with a prefill one is read as the first was: a binary one was a
    UnicodeDecodeError, a 20 MB one was read whole (7-10 s)."""
    (tmp_path / "qwen-prefill.sh").write_text(PREFILL_SCRIPT.read_text())
    (tmp_path / "qwen-decode.sh").write_bytes(partner)
    for command in ("validate", "import"):
        t0 = time.process_time()
        code, out, err = recipectl_in_process(command, str(tmp_path / "qwen-prefill.sh"))
        assert time.process_time() - t0 < CPU_LIMIT_S
        assert code == 2 and reason in out + err and "qwen-decode.sh" in out + err, (command, out, err)
