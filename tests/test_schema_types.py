"""A recipe is data: values that would be code where they are rendered are schema errors (exit 2),
each naming its field and a fix. Env names, hosts, images, the vLLM version, control characters
in any string, and ports whose derived values leave the port range."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from recipectl.loader import load_text
from recipectl.schema import Recipe

ROOT = Path(__file__).resolve().parent.parent
BASES = yaml.safe_load((ROOT / "tests" / "rule_cases" / "_bases.yaml").read_text())


def errors(base: str, edit) -> list[tuple[str, str, str | None]]:
    data = copy.deepcopy(BASES[base])
    edit(data)
    result = load_text(yaml.safe_dump(data, sort_keys=False), "r.yaml")
    return [(d.path, d.message, d.fix) for d in result.diagnostics]


def set_path(data: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


REJECTED = [
    # env names are written as NAME=value: a name is never code
    ("cpu", "engine.env", {"A=1 true; touch /tmp/x; X": "1"}),
    ("cpu", "engine.env", {"$(touch x)": "1"}),
    ("cpu", "prefill.env", {"`touch x`": "1"}),
    ("gpu", "decode.env", {"1ABC": "1"}),
    ("cpu", "decode.env", {"A B": "1"}),
    # hosts: RFC 1123 names or IP addresses, each once
    ("cpu", "cluster.hosts", ["$(touch x)"]),
    ("cpu", "cluster.hosts", ["../etc"]),
    ("cpu", "cluster.hosts", ["host name"]),
    ("cpu", "cluster.hosts", ["http://a"]),
    ("cpu", "cluster.hosts", ["1.2.3"]),
    ("cpu", "cluster.hosts", ["-leading-dash"]),
    # images: OCI references
    ("gpu", "engine.image", "vllm/vllm-openai:v0.26.0 --privileged"),
    ("gpu", "engine.image", "$(touch x)"),
    ("gpu", "engine.image", "Vllm/Upper"),
    # vLLM version: a full PEP 440 match, not a prefix
    ("gpu", "engine.vllm_version", "0.26.0; touch x"),
    ("gpu", "engine.vllm_version", "0.26.0 x"),
    ("gpu", "engine.vllm_version", "latest"),
    # no control characters anywhere
    ("gpu", "model.path", "org/model\n- kind: Pod"),
    ("gpu", "model.served_name", "a\x00b"),
    ("gpu", "engine.vllm_version", "0.26.0\n"),
    ("gpu", "description", "one\u2028two"),
    ("gpu", "prefill.extra_args", ["--x", "a\nb"]),
    ("gpu", "engine.env", {"X": "a\rb"}),
    ("gpu", "router.extra_args", ["\x1b[2J"]),
    ("gpu", "prefill.speculative_config", {"method": "ngram\n"}),
    ("gpu", "launch.run_dir", "runs\n"),
]


@pytest.mark.parametrize("base,field,value", REJECTED, ids=[f"{r[1]}={r[2]!r}"[:60] for r in REJECTED])
def test_value_is_rejected_naming_its_field(base, field, value):
    def edit(d):
        if field == "cluster.hosts":
            d["cluster"]["nodes"] = len(value)
        set_path(d, field, value)

    found = errors(base, edit)
    assert found, f"{field}={value!r} validated"
    assert [p for p, _, _ in found] == [field], found
    assert all(fix for _, _, fix in found), found


ACCEPTED = [
    ("cpu", "cluster.hosts", ["127.0.0.1"]),
    ("cpu", "cluster.hosts", ["::1"]),
    ("cpu", "cluster.hosts", ["gpu-node-1.cluster.example"]),
    ("gpu", "engine.image", "vllm/vllm-openai:v0.26.0"),
    ("gpu", "engine.image", "registry.example:5000/team/vllm_openai:nightly-2026.01"),
    ("gpu", "engine.image", "ghcr.io/org/vllm@sha256:" + "a" * 64),
    ("gpu", "engine.vllm_version", "0.26.0rc1.dev12+g1234abc"),
    ("gpu", "engine.vllm_version", "v0.26"),
    ("gpu", "engine.env", {"_UNDERSCORE": "1", "HF_TOKEN": "${HF_TOKEN}", "X": "a b; $(not code) `quoted`"}),
    ("gpu", "model.path", '/models/my "odd" $model dir'),
    ("gpu", "description", "Unicode is fine: Qwen3.5 — 混合注意力"),
]


@pytest.mark.parametrize("base,field,value", ACCEPTED, ids=[f"{r[1]}={r[2]!r}"[:60] for r in ACCEPTED])
def test_value_is_accepted(base, field, value):
    def edit(d):
        if field == "cluster.hosts":
            d["cluster"]["nodes"] = len(value)
        set_path(d, field, value)

    assert errors(base, edit) == []


def test_duplicate_hosts_are_rejected():
    def edit(d):
        d["cluster"].update(hosts=["node-a", "NODE-A"], nodes=2)

    (found,) = errors("cpu", edit)
    assert found[0] == "cluster.hosts" and "listed twice" in found[1]


@pytest.mark.parametrize(
    "role,edit,message",
    [
        # two endpoints on one host: the second listens on port + 1
        ("prefill", lambda p: p.update(port=65535, endpoints=2, cpu_cores=["0", "1"]), "65536"),
        # DP 2: the side channel uses base + rank
        ("decode", lambda p: p.update(side_channel_port=65535, parallel="DP2"), "65536"),
    ],
)
def test_derived_ports_past_65535_are_rejected(role, edit, message):
    found = errors("cpu", lambda d: edit(d[role]))
    assert [p for p, _, _ in found] == [role], found
    path, text, fix = found[0]
    assert message in text and f"{role}." in text and fix


def test_the_last_port_in_range_is_accepted():
    def edit(d):
        d["prefill"].update(port=65534, endpoints=2, cpu_cores=["0", "1"])
        d["prefill"]["side_channel_port"] = 65534
        d["decode"].update(port=65535, side_channel_port=65535)

    assert errors("cpu", edit) == []


def test_gpu_endpoints_per_host_bound_the_ports():
    """4 prefill DEP2 endpoints on 4-GPU nodes: two per node, so port 65534 is the last that fits."""
    assert errors("gpu", lambda d: d["prefill"].update(port=65534)) == []
    (found,) = errors("gpu", lambda d: d["prefill"].update(port=65535))
    assert "65536" in found[1]


@pytest.mark.parametrize(
    "field,value",
    [("engine.env", {"A=1 true; touch x; X": "1"}), ("cluster.hosts", ["$(touch x)"]), ("model.path", "m\nx")],
)
def test_cli_exits_2_naming_the_field(recipectl_cli, tmp_path, field, value):
    data = copy.deepcopy(BASES["cpu"])
    set_path(data, field, value)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"[{field}]" in r.stdout and "fix:" in r.stdout
    r = recipectl_cli("render", str(path), "-o", str(tmp_path / "out"))
    assert r.returncode == 2 and not (tmp_path / "out").exists()
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("var", ["VLLM_FOO", "Mixed_Case", "lower"])
def test_a_bad_value_under_an_env_name_is_reported_at_that_name(var):
    """Keys of the recipe's own (env names) are kept in the path whatever their case; only the
    union members pydantic tried are left out."""
    found = errors("cpu", lambda d: set_path(d, "decode.env", {var: [1, 2]}))
    assert [p for p, _, _ in found] == [f"decode.env.{var}"], found


# ---------------------------------------------------------------------------------------------------
# YAML's true and false are no numbers: pydantic's int and float had taken them as 1 and 0


def _number_fields(model, prefix: str = "") -> list[str]:
    """The dotted path of every whole-number and number field of `model` and its sections."""
    out = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        kinds = set()
        for k in {f.annotation, *get_args(f.annotation)}:  # `Whole | None`: Annotated inside a union
            kinds.add(get_args(k)[0] if get_origin(k) is Annotated else k)
        sections = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if sections:
            out += _number_fields(sections[0], f"{prefix}{key}.")
        elif kinds & {int, float} and not {get_origin(k) for k in kinds} & {list}:  # lists: below
            out.append(prefix + key)
    return out


NUMBER_FIELDS = _number_fields(Recipe)


def _set_number(d: dict, field: str, value) -> None:
    if field.endswith((".parallel.tp", ".parallel.dp")):  # `parallel: TP4` written as its mapping
        set_path(d, field.rsplit(".", 1)[0], {})
    set_path(d, field, value)


def test_the_number_fields_are_found():
    assert {"prefill.port", "router.port", "workload.isl", "cluster.nodes", "prefill.gpu_memory_utilization"} <= set(
        NUMBER_FIELDS
    )


@pytest.mark.parametrize("field", NUMBER_FIELDS)
@pytest.mark.parametrize("value", [True, False])
def test_true_or_false_is_no_number(field, value):
    found = errors("gpu", lambda d: _set_number(d, field, value))
    assert any(p == field and "not true or false" in m and fix for p, m, fix in found), found


@pytest.mark.parametrize("field", ["workload.concurrency", "prefill.devices", "engine.patches"])
def test_true_in_a_list_of_numbers_is_no_number(field):
    value = [[0, True]] if field == "prefill.devices" else [1, True]
    found = errors("gpu", lambda d: set_path(d, field, value))
    assert any(p.startswith(field) and "not true or false" in m for p, m, _ in found), found


def test_port_true_is_refused_at_its_line(recipectl_cli, tmp_path):
    """`port: true` had been port 1."""
    path = tmp_path / "r.yaml"
    path.write_text(
        (ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml").read_text().replace("port: 8100", "port: true")
    )
    r = recipectl_cli("validate", str(path))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{path}:37:3 SCH001 error: Input should be a whole number, not true or false" in r.stdout
    assert "[prefill.port]" in r.stdout and "fix: write a whole number" in r.stdout
