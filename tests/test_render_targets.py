"""The rendered deployments are valid for the tool that runs them, and say exactly what the recipe says.

- bash and Slurm scripts: `bash -n` and `shellcheck` (missing shellcheck is a failure under CI or
  --require-all, a skip elsewhere: tests/requirements.py);
- Kubernetes manifests: every document validates offline, strictly (no unknown field), against the
  Kubernetes JSON schemas of the `kubernetes-validate` package (Service, Deployment, the pod
  templates) and against the LeaderWorkerSet CRD vendored in tests/k8s_schemas/, plus the
  API-server checks that no schema holds (names, labels, selectors);
- a model path with spaces, quotes and `$` reaches vllm unchanged: the bash and Slurm scripts are
  run for real with stand-ins for vllm, vllm-router, srun, scontrol and curl that record their
  argv; the manifests go through the kubelet's `$(VAR)` expansion and, for LWS workers, `sh -c`;
- a flag the recipe's vLLM version does not accept is an error, never a rendered flag;
- `${HF_TOKEN}` is a reference on every target, never a value.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from recipectl.errors import RecipectlError
from recipectl.render.processes import Deployment, build_deployment
from recipectl.render.targets import render, write
from recipectl.render.values import EnvRef, NodeAddress, UrlOf
from recipectl.validate import load_variant, validate_file

from .requirements import PIP_TEST_EXTRA, SHELLCHECK_INSTALL, require

ROOT = Path(__file__).resolve().parent.parent
GB200 = ROOT / "recipes" / "gb200" / "qwen3.5-397b-nvfp4-pd.yaml"
H200 = ROOT / "recipes" / "h200" / "qwen3.5-35b-a3b-pd.yaml"
VARIANT = "prefill-endpoints-4"
SCHEMAS = ROOT / "tests" / "k8s_schemas"
LWS_SCHEMA = SCHEMAS / "leaderworkerset.x-k8s.io_v1.json"
ODD_PATH = '/models/my "odd" $model dir'
# kubelet syntax too: `$(NAME)` of a variable the container has, and `$$`
KUBELET_PATH = "/models/$(HF_TOKEN) it's $$ dir"
SECRET = "hf_canary_0123456789_never_rendered"


# ---------------------------------------------------------------------------------------------------
# rendering helpers


def deployment(path: Path, variant: str | None = None) -> Deployment:
    return build_deployment(load_variant(str(path), variant).recipe)


def gb200_recipe(tmp_path: Path, edit=None, name: str = "recipe.yaml") -> Path:
    """The seed recipe as one recipe (the 4-prefill variant, no matrix), edited."""
    data = yaml.safe_load(GB200.read_text())
    data.pop("matrix")
    data["prefill"]["endpoints"] = 4
    if edit:
        edit(data)
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def odd_recipe(tmp_path: Path, model_path: str) -> Path:
    def edit(d):
        d["model"]["path"] = model_path
        d["model"].pop("served_name")  # --served-model-name defaults to the path: a second odd word

    return gb200_recipe(tmp_path, edit, name="odd.yaml")


@pytest.fixture(scope="module")
def seed() -> Deployment:
    return deployment(GB200, VARIANT)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, seed) -> dict[str, list[Path]]:
    """The seed's deployment (and the H200 recipe for bash) written as the CLI writes it."""
    out = tmp_path_factory.mktemp("rendered")
    files = {t: write(render(seed, t), out / "gb200" / t) for t in ("bash", "slurm", "k8s")}
    files["h200-bash"] = write(render(deployment(H200), "bash"), out / "h200" / "bash")
    return files


def shell_scripts(rendered) -> list[Path]:
    return rendered["bash"] + rendered["slurm"] + rendered["h200-bash"]


# ---------------------------------------------------------------------------------------------------
# bash and Slurm: syntax and shellcheck


def test_scripts_pass_bash_n(rendered):
    for script in shell_scripts(rendered):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"


def shellcheck(paths: list[Path], exclude: tuple[str, ...] = ()) -> None:
    exe = shutil.which("shellcheck")
    require(exe is not None, "shellcheck", SHELLCHECK_INSTALL)
    opts = [f"--exclude={','.join(exclude)}"] if exclude else []
    r = subprocess.run([exe, "--shell=bash", "--format=gcc", *opts, *map(str, paths)], capture_output=True, text=True)
    assert r.returncode == 0, "shellcheck findings:\n" + r.stdout + r.stderr


def test_scripts_pass_shellcheck(rendered):
    shellcheck(shell_scripts(rendered))


def test_shellcheck_runs_on_what_it_is_given(tmp_path):
    """The check above is not vacuous: a script with an unquoted expansion is reported."""
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/cache\n")
    with pytest.raises(AssertionError, match="SC2086"):
        shellcheck([bad])


# ---------------------------------------------------------------------------------------------------
# Kubernetes: offline schema validation


def _kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError:
        kubernetes_validate = None
    require(
        kubernetes_validate is not None, "the kubernetes-validate package (Kubernetes JSON schemas)", PIP_TEST_EXTRA
    )
    return kubernetes_validate


def k8s_versions() -> list[str]:
    """1.30 (the oldest release the manifests target) and the newest schema set installed."""
    try:
        from kubernetes_validate import latest_version
    except ImportError:
        return ["1.30.0"]
    return sorted({"1.30.0", latest_version()})


@lru_cache(maxsize=None)
def _definitions(version: str) -> dict:
    from importlib import resources

    kv = _kubernetes_validate()
    schemas = resources.files(kv.__name__) / "kubernetes-json-schema"
    path = schemas / f"v{version}-local-strict" / "_definitions.json"
    return json.loads(path.read_text())


def crd_to_json_schema(node, defs_id: str):
    """A CRD's structural openAPIV3Schema as a JSON schema that rejects unknown fields, as the API
    server does with field validation Strict (kubectl's default): objects with properties get
    additionalProperties: false unless x-kubernetes-preserve-unknown-fields; int-or-string and
    nullable become JSON-schema types."""
    if isinstance(node, list):
        return [crd_to_json_schema(x, defs_id) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: crd_to_json_schema(sub, defs_id) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = crd_to_json_schema(value, defs_id)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [crd_to_json_schema(x, defs_id) for x in value]
        elif key.startswith("x-kubernetes-") or key == "nullable":
            continue
        else:
            out[key] = value
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@lru_cache(maxsize=None)
def lws_validator(version: str):
    """LeaderWorkerSet v1 (vendored CRD schema), with metadata checked as ObjectMeta and each pod
    template also checked against the core PodTemplateSpec of Kubernetes `version`."""
    import jsonschema
    from referencing import Registry, Resource

    defs = _definitions(version)
    defs_id = defs["$id"]
    crd = json.loads(LWS_SCHEMA.read_text())
    schema = crd_to_json_schema(crd["openAPIV3Schema"], defs_id)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["properties"]["apiVersion"] = {"const": f"{crd['group']}/{crd['version']}"}
    schema["properties"]["kind"] = {"const": crd["kind"]}
    object_meta = f"{defs_id}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    schema["properties"]["metadata"] = {"$ref": object_meta}
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata", "spec"})
    template = schema["properties"]["spec"]["properties"]["leaderWorkerTemplate"]["properties"]
    core_pod_template = {"$ref": f"{defs_id}#/$defs/io.k8s.api.core.v1.PodTemplateSpec"}
    for name in ("leaderTemplate", "workerTemplate"):
        template[name] = {"allOf": [template[name], core_pod_template]}
    registry = Registry().with_resource(defs_id, Resource.from_contents(defs))
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_k8s(doc: dict, version: str) -> list[str]:
    """Schema errors of one manifest ([] when valid)."""
    kv = _kubernetes_validate()
    if doc.get("apiVersion") == "leaderworkerset.x-k8s.io/v1":
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in lws_validator(version).iter_errors(doc)]
    try:
        kv.validate(doc, version, strict=True)
    except kv.ValidationError as e:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"]
    except kv.SchemaNotFoundError as e:
        return [e.message]
    return []


def k8s_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def test_vendored_lws_schema_is_attributed():
    crd = json.loads(LWS_SCHEMA.read_text())
    assert crd["source"]["repository"] == "https://github.com/kubernetes-sigs/lws"
    assert "Apache License" in (SCHEMAS / "LICENSE").read_text()
    assert (crd["group"], crd["version"], crd["kind"]) == ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet")


@pytest.mark.parametrize("version", k8s_versions())
def test_every_k8s_document_validates(rendered, version):
    (path,) = rendered["k8s"]
    docs = k8s_docs(path)
    kinds = Counter(d["kind"] for d in docs)
    # 4 prefill Deployments + the router, 1 decode LeaderWorkerSet, a Service for each endpoint and the router
    assert kinds == {"Service": 6, "Deployment": 5, "LeaderWorkerSet": 1}, kinds
    errors = {f"{d['kind']}/{d['metadata']['name']}": validate_k8s(d, version) for d in docs}
    assert {k: v for k, v in errors.items() if v} == {}


def _seed_doc(rendered, kind: str, name_part: str = "") -> dict:
    (path,) = rendered["k8s"]
    return next(d for d in k8s_docs(path) if d["kind"] == kind and name_part in d["metadata"]["name"])


def _set(doc: dict, path: str, value) -> dict:
    import copy

    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    node[int(last) if last.isdigit() else last] = value
    return doc


BROKEN = [
    # a string where an integer is required
    ("Deployment", "prefill-0", "spec.replicas", "1"),
    ("Deployment", "prefill-0", "spec.template.spec.containers.0.ports.0.containerPort", "8100"),
    ("Service", "router", "spec.ports.0.port", "30000"),
    ("LeaderWorkerSet", "decode", "spec.leaderWorkerTemplate.size", "2"),
    # an enum value the CRD does not have
    ("LeaderWorkerSet", "decode", "spec.leaderWorkerTemplate.restartPolicy", "Always"),
    # an unknown field (strict validation), in the CRD's own part and in an embedded pod template
    ("LeaderWorkerSet", "decode", "spec.leaderWorkerTemplate.sizee", 2),
    ("LeaderWorkerSet", "decode", "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.argz", ["x"]),
    ("Deployment", "prefill-0", "spec.template.spec.containers.0.env.0.valueFrom.secretRef", {"name": "x"}),
    # metadata is ObjectMeta
    ("LeaderWorkerSet", "decode", "metadata.labels", ["not", "a", "map"]),
]


@pytest.mark.parametrize("kind,name_part,path,value", BROKEN, ids=[f"{b[0]}:{b[2]}" for b in BROKEN])
def test_a_broken_manifest_fails_validation(rendered, kind, name_part, path, value):
    """The validator is not vacuous: each deliberately broken copy of a rendered manifest fails."""
    doc = _seed_doc(rendered, kind, name_part)
    version = k8s_versions()[0]
    assert validate_k8s(doc, version) == []
    assert validate_k8s(_set(doc, path, value), version) != []


DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def _pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]]
    if doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    return []


def api_server_problems(docs: list[dict]) -> list[str]:
    """What the API server rejects that no JSON schema expresses (apimachinery validation)."""
    problems = []
    names = Counter((d["kind"], d["metadata"]["name"]) for d in docs)
    problems += [f"duplicate {k}/{n}" for (k, n), c in names.items() if c > 1]
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        where = f"{kind}/{name}"
        if kind == "Service" and not (len(name) <= 63 and DNS1035.match(name)):
            problems.append(f"{where}: a Service name must be a DNS-1035 label")
        if not (len(name) <= 253 and DNS1123_SUBDOMAIN.match(name)):
            problems.append(f"{where}: not a DNS-1123 subdomain")
        if kind == "Deployment" and len(name) > 63:  # its pods' pod-template-hash label / hostname
            problems.append(f"{where}: name longer than 63")
        for key, value in d["metadata"].get("labels", {}).items():
            if not (len(value) <= 63 and LABEL_VALUE.match(value)):
                problems.append(f"{where}: label {key}={value!r} is not a valid label value")
        if kind == "Deployment":
            selector = d["spec"]["selector"]["matchLabels"]
            labels = d["spec"]["template"]["metadata"]["labels"]
            if any(labels.get(k) != v for k, v in selector.items()):
                problems.append(f"{where}: selector does not match the pod template's labels")
        for tpl in _pod_templates(d):
            for key, value in tpl["metadata"].get("labels", {}).items():
                if not (len(value) <= 63 and LABEL_VALUE.match(value)):
                    problems.append(f"{where}: pod label {key}={value!r} is not a valid label value")
            for c in tpl["spec"]["containers"]:
                for e in c.get("env", []):
                    if not ENV_NAME.match(e["name"]):
                        problems.append(f"{where}: env name {e['name']!r}")
                for p in c.get("ports", []):
                    if "name" in p and not (len(p["name"]) <= 15 and PORT_NAME.match(p["name"])):
                        problems.append(f"{where}: port name {p['name']!r}")
        if kind == "Service":
            selector = d["spec"]["selector"]
            matched = [
                t
                for w in docs
                for t in _pod_templates(w)
                if all(
                    t["metadata"]["labels"].get(k) == v
                    for k, v in selector.items()
                    if k != "leaderworkerset.sigs.k8s.io/worker-index"
                )
            ]
            if not matched:
                problems.append(f"{where}: selects no pod template")
    return problems


def test_k8s_manifests_pass_api_server_checks(rendered):
    (path,) = rendered["k8s"]
    assert api_server_problems(k8s_docs(path)) == []


# ---------------------------------------------------------------------------------------------------
# every shipped recipe (every variant) renders valid output on every target


def shipped_recipes() -> list[tuple[str, Path, str | None]]:
    out = []
    for path in sorted((ROOT / "recipes").rglob("*.yaml")):
        report, recipes = validate_file(path)
        for r in recipes:
            out.append((r.recipe.name, path, r.variant and r.recipe.name))
    return out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict[str, dict[str, list[Path]]]:
    out = tmp_path_factory.mktemp("shipped")
    files: dict[str, dict[str, list[Path]]] = {}
    for name, path, variant in shipped_recipes():
        dep = deployment(path, variant)
        files[name] = {t: write(render(dep, t), out / name / t) for t in ("bash", "slurm", "k8s")}
    return files


def test_every_shipped_variant_is_rendered(shipped):
    assert len([n for n in shipped if n.startswith("qwen3.5-397b-nvfp4-gb200-pd.")]) == 5
    assert "qwen3.5-35b-a3b-h200-pd" in shipped


def test_every_shipped_script_passes_bash_n_and_shellcheck(shipped):
    scripts = [p for targets in shipped.values() for t in ("bash", "slurm") for p in targets[t]]
    for script in scripts:
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"{script.name}: {r.stderr}"
    shellcheck(scripts)


def test_every_shipped_manifest_validates(shipped):
    version = k8s_versions()[0]
    problems = {}
    for name, targets in shipped.items():
        (path,) = targets["k8s"]
        docs = k8s_docs(path)
        for d in docs:
            if errors := validate_k8s(d, version):
                problems[f"{name}: {d['kind']}/{d['metadata']['name']}"] = errors
        if extra := api_server_problems(docs):
            problems[name] = extra
    assert problems == {}


def test_k8s_objects_of_different_variants_do_not_collide(shipped):
    seen: dict[tuple[str, str], str] = {}
    clashes = []
    for name, targets in shipped.items():
        (path,) = targets["k8s"]
        for d in k8s_docs(path):
            key = (d["kind"], d["metadata"]["name"])
            if key in seen:
                clashes.append(f"{key[0]}/{key[1]}: {seen[key]} and {name}")
            seen[key] = name
    assert clashes == []


# ---------------------------------------------------------------------------------------------------
# a model path with spaces, quotes and `$` survives every target


FAKE_RECORDER = """#!{python}
# Stand-in for vllm / vllm-router: records its argv and some of its environment, waits until every
# expected process has recorded (so that no process is stopped before it wrote), then exits.
import json, os, sys, time
from pathlib import Path

out = Path(os.environ["ARGV_DIR"])
rec = {{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "env": {{k: os.environ.get(k) for k in ("HF_TOKEN", "VLLM_NIXL_SIDE_CHANNEL_HOST")}}}}
tmp = out / f".{{os.getpid()}}.tmp"
tmp.write_text(json.dumps(rec))
tmp.rename(out / f"{{os.getpid()}}.json")
deadline = time.monotonic() + 60
while len(list(out.glob("*.json"))) < int(os.environ["EXPECTED"]) and time.monotonic() < deadline:
    time.sleep(0.02)
"""

FAKE_SRUN = """#!/usr/bin/env bash
# srun stand-in: drop srun's own options (and the container options), run the step in the foreground
while [[ $# -gt 0 && $1 == -* ]]; do shift; done
exec "$@"
"""

FAKE_SCONTROL = """#!/usr/bin/env bash
# `scontrol show hostnames LIST` stand-in
printf '%s\\n' $FAKE_NODES
"""

FAKE_NODES = ["gb-a", "gb-b", "gb-c", "gb-d"]


def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    recorder = FAKE_RECORDER.format(python=sys.executable)
    files = {
        "vllm": recorder,
        "vllm-router": recorder,
        "srun": FAKE_SRUN,
        "scontrol": FAKE_SCONTROL,
        "curl": "#!/bin/sh\nexit 0\n",
        "scancel": "#!/bin/sh\nexit 0\n",
    }
    for name, text in files.items():
        p = bin_dir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def run_script(script: Path, tmp_path: Path, expected: int, extra_env: dict | None = None) -> list[dict]:
    """Run a rendered script with the stand-ins first on PATH; the argv/env each process got."""
    argv_dir = tmp_path / f"argv-{script.name}"
    argv_dir.mkdir()
    bin_dir = tmp_path / "fakebin" if (tmp_path / "fakebin").is_dir() else fake_bin(tmp_path)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "ARGV_DIR": str(argv_dir),
        "EXPECTED": str(expected),
        "LOG_DIR": str(tmp_path / "logs" / script.name),
        "HF_TOKEN": SECRET,
        "READY_TIMEOUT": "30",
        **(extra_env or {}),
    }
    r = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    records = [json.loads(p.read_text()) for p in sorted(argv_dir.glob("*.json"))]
    assert len(records) == expected, f"{script.name} rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return records


def expected_argv(dep: Deployment, procs, address, home: Path) -> list[list[str]]:
    """Each process's argv as it must arrive, with node addresses resolved by `address`."""

    def word(v):
        if type(v).__name__ == "HomePath":  # `~/x` in a recipe: $HOME of whoever runs the script
            return os.path.join(str(home), v.rest)
        if isinstance(v, NodeAddress):
            return address(v.node)
        if isinstance(v, UrlOf):
            return f"http://{address(v.node)}:{v.port}"
        if isinstance(v, EnvRef):
            return {"HF_TOKEN": SECRET}[v.name]
        return v

    return sorted([word(a) for a in p.argv] for p in procs)


# SC2016 (info: "expressions don't expand in single quotes") is what a `$` in a literal must look like
LITERAL_DOLLAR = ("SC2016",)
MODEL_PATHS = [pytest.param(ODD_PATH, id="spaces-quotes-dollar"), pytest.param(KUBELET_PATH, id="kubelet-reference")]


@pytest.mark.parametrize("model_path", MODEL_PATHS)
def test_model_path_survives_bash(tmp_path, model_path):
    recipe = odd_recipe(tmp_path, model_path)
    dep = deployment(recipe)
    scripts = write(render(dep, "bash"), tmp_path / "bash")
    shellcheck(scripts, exclude=LITERAL_DOLLAR)
    hosts = dep.recipe.cluster.host_names
    for node, script in zip(dep.nodes_used, scripts, strict=True):
        assert script.name.endswith(f".{hosts[node]}.sh")
        procs = dep.on_node(node)
        records = run_script(script, tmp_path, len(procs))
        assert sorted(r["argv"] for r in records) == expected_argv(dep, procs, lambda n: hosts[n], tmp_path)
        for r in records:
            assert r["env"]["HF_TOKEN"] == SECRET  # expanded on the node, at run time
            if r["argv"][0] == "vllm":
                assert r["argv"][1:3] == ["serve", model_path]
                assert r["argv"][r["argv"].index("--served-model-name") + 1] == model_path


@pytest.mark.parametrize("model_path", MODEL_PATHS)
def test_model_path_survives_slurm(tmp_path, model_path):
    recipe = odd_recipe(tmp_path, model_path)
    dep = deployment(recipe)
    (script,) = write(render(dep, "slurm"), tmp_path / "slurm")
    shellcheck([script], exclude=LITERAL_DOLLAR)
    records = run_script(
        script,
        tmp_path,
        len(dep.processes),
        {
            "SLURM_JOB_ID": "42",
            "SLURM_JOB_NODELIST": "gb-[a-d]",
            "SLURM_SUBMIT_DIR": str(tmp_path),
            "FAKE_NODES": " ".join(FAKE_NODES),
        },
    )
    index = {n: i for i, n in enumerate(dep.nodes_used)}
    expected = expected_argv(dep, dep.processes, lambda n: FAKE_NODES[index[n]], tmp_path)
    assert sorted(r["argv"] for r in records) == expected
    serve = [r for r in records if r["argv"][0] == "vllm"]
    assert len(serve) == len(dep.workers)
    for r in serve:
        assert r["argv"][1:3] == ["serve", model_path]
        assert r["env"]["HF_TOKEN"] == SECRET


def test_unset_secret_reference_fails_fast(tmp_path):
    """A script whose ${HF_TOKEN} is unset stops at once, says so, and starts nothing."""
    (script,) = write(render(deployment(H200), "bash"), tmp_path / "bash")
    bin_dir = fake_bin(tmp_path)
    (bin_dir / "curl").write_text("#!/bin/sh\nexit 7\n")  # no worker ever answers
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "ARGV_DIR": str(argv_dir),
        "EXPECTED": "1",
        "LOG_DIR": str(tmp_path / "logs"),
    }
    try:
        r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("still waiting for workers after 10 s", pytrace=False)
    assert r.returncode != 0
    assert "HF_TOKEN" in r.stderr
    assert "started" not in r.stdout
    assert list(argv_dir.glob("*.json")) == []


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's expansion of command/args (k8s.io/kubernetes third_party/forked/golang/expansion):
    `$$` -> `$`, `$(NAME)` -> the container's variable NAME when defined, anything else unchanged."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
            elif nxt == "(":
                close = text.find(")", i + 2)
                if close < 0:
                    out.append(text[i:])
                    i = n
                else:
                    name = text[i + 2 : close]
                    out.append(env.get(name, text[i : close + 1]))
                    i = close + 1
            else:
                out.append(text[i : i + 2])
                i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def container_env(container: dict, lws: bool, worker_index: int) -> dict[str, str]:
    """The variables a container has at run time: its env (secrets and pod IP filled in) and, in a
    LeaderWorkerSet, the ones LWS injects."""
    env = {}
    if lws:
        env.update(LWS_LEADER_ADDRESS="lws-leader.example", LWS_GROUP_SIZE="2", LWS_WORKER_INDEX=str(worker_index))
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = kubelet_expand(e["value"], env)
        elif "secretKeyRef" in e.get("valueFrom", {}):
            env[e["name"]] = SECRET
        else:
            env[e["name"]] = "10.0.0.7"
    return env


def k8s_process_argv(tmp_path: Path, container: dict, env: dict[str, str]) -> list[str]:
    """What the container's process gets as argv: kubelet expansion, then `sh -c` when that is the
    command (run for real, with the vllm stand-in first on PATH)."""
    argv = [kubelet_expand(a, env) for a in container["command"] + container.get("args", [])]
    if argv[:2] != ["sh", "-c"]:
        return argv
    argv_dir = tmp_path / f"k8s-argv-{len(list(tmp_path.glob('k8s-argv-*')))}"
    argv_dir.mkdir()
    bin_dir = tmp_path / "fakebin" if (tmp_path / "fakebin").is_dir() else fake_bin(tmp_path)
    run_env = {**env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_DIR": str(argv_dir), "EXPECTED": "1"}
    r = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=60)
    records = [json.loads(p.read_text()) for p in argv_dir.glob("*.json")]
    assert len(records) == 1, r.stderr
    return records[0]["argv"]


def check_k8s_model_path(tmp_path: Path, model_path: str) -> None:
    dep = deployment(odd_recipe(tmp_path, model_path))
    (path,) = write(render(dep, "k8s"), tmp_path / "k8s")
    docs = k8s_docs(path)  # yaml.safe_load_all: the quoting is valid YAML
    for d in docs:
        assert validate_k8s(d, k8s_versions()[0]) == [], d["metadata"]["name"]
    seen = 0
    for d in docs:
        templates = _pod_templates(d)
        for i, tpl in enumerate(templates):
            for c in tpl["spec"]["containers"]:
                env = container_env(c, d["kind"] == "LeaderWorkerSet", worker_index=i)
                argv = k8s_process_argv(tmp_path, c, env)
                if argv[0] != "vllm":
                    continue
                seen += 1
                assert argv[1:3] == ["serve", model_path], (d["metadata"]["name"], argv[:4])
                assert argv[argv.index("--served-model-name") + 1] == model_path
                assert SECRET not in " ".join(argv)
                if i == 1:  # the LWS worker: its DP start rank comes from its index
                    assert argv[argv.index("--data-parallel-start-rank") + 1] == "4"
                    assert argv[argv.index("--data-parallel-address") + 1] == "lws-leader.example"
    assert seen == 6  # 4 prefill Deployments, the decode leader and its worker


def test_model_path_survives_k8s(tmp_path):
    check_k8s_model_path(tmp_path, ODD_PATH)


def test_model_path_with_kubelet_syntax_survives_k8s(tmp_path):
    check_k8s_model_path(tmp_path, KUBELET_PATH)


# ---------------------------------------------------------------------------------------------------
# a flag the recipe's vLLM version does not accept is never rendered


@pytest.mark.parametrize("target", ["bash", "slurm", "k8s"])
def test_unaccepted_gdn_backend_is_an_error_not_a_flag(recipectl_cli, tmp_path, target):
    # sycl is a choice from 0.33 (engine fact gdn-prefill-backend-sycl); cutedsl is one from 0.22
    recipe = gb200_recipe(tmp_path, lambda d: d["prefill"].update(gdn_prefill_backend="sycl"))
    out = tmp_path / "out"
    r = recipectl_cli("render", str(recipe), "--target", target, "-o", str(out))
    assert r.returncode != 0
    # the rules (VER004) refuse it before the renderer's own check would
    assert "VER004" in r.stderr and "sycl" in r.stderr and "0.26" in r.stderr, r.stderr
    assert "fix:" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() or not any(out.iterdir()), "a file was written"
    r = recipectl_cli("render", str(recipe), "--target", target)  # stdout: nothing rendered either
    assert r.returncode != 0 and "vllm serve" not in r.stdout and "--gdn-prefill-backend" not in r.stdout


def test_unaccepted_gdn_backend_raises_in_process(tmp_path):
    recipe = gb200_recipe(tmp_path, lambda d: d["prefill"].update(gdn_prefill_backend="sycl"))
    with pytest.raises(RecipectlError, match="does not accept --gdn-prefill-backend sycl"):
        deployment(recipe)


def test_gdn_backend_is_rendered_where_the_version_accepts_it(tmp_path):
    """The control: the same backend on a vLLM release that has it is rendered."""

    def edit(d):
        d["prefill"]["gdn_prefill_backend"] = "cutedsl"
        d["engine"]["vllm_version"] = "0.32.0"
        d["engine"]["image"] = "vllm/vllm-openai:v0.32.0"

    dep = deployment(gb200_recipe(tmp_path, edit))
    prefill = [p for p in dep.workers if p.kind == "prefill"]
    assert len(prefill) == 4
    for p in prefill:
        i = p.argv.index("--gdn-prefill-backend")
        assert p.argv[i + 1] == "cutedsl"
    (script,) = render(dep, "slurm")
    assert script.text.count("--gdn-prefill-backend cutedsl") == 4


# ---------------------------------------------------------------------------------------------------
# ${HF_TOKEN} is a reference on every target


def test_hf_token_is_a_reference_in_scripts(rendered, seed):
    for script in shell_scripts(rendered):
        text = script.read_text()
        env_lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("HF_TOKEN=")]
        assert env_lines, script.name
        assert set(env_lines) == {'HF_TOKEN="${HF_TOKEN}" \\'}, (script.name, set(env_lines))
    # every worker gets it (the router needs no secret)
    (sbatch,) = rendered["slurm"]
    assert sbatch.read_text().count('HF_TOKEN="${HF_TOKEN}"') >= len(seed.workers)


def test_hf_token_is_a_secret_ref_in_k8s(rendered):
    (path,) = rendered["k8s"]
    containers = [c for d in k8s_docs(path) for t in _pod_templates(d) for c in t["spec"]["containers"]]
    vllm = [c for c in containers if c["name"] == "vllm"]
    assert len(vllm) == 6
    for c in containers:
        for e in c.get("env", []):
            if e["name"] == "HF_TOKEN":
                assert "value" not in e
                assert e["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "value"}}
    for c in vllm:
        assert "HF_TOKEN" in {e["name"] for e in c["env"]}
    assert "${HF_TOKEN}" not in path.read_text()


@pytest.mark.parametrize("target", ["bash", "slurm", "k8s"])
def test_secret_value_in_the_environment_is_never_rendered(recipectl_cli, tmp_path, target):
    out = tmp_path / target
    r = recipectl_cli(
        "render", str(GB200), "--variant", VARIANT, "--target", target, "-o", str(out), env={"HF_TOKEN": SECRET}
    )
    assert r.returncode == 0, r.stderr
    for p in out.iterdir():
        assert SECRET not in p.read_text(), p.name
    r = recipectl_cli("render", str(GB200), "--variant", VARIANT, "--target", target, env={"HF_TOKEN": SECRET})
    assert r.returncode == 0 and SECRET not in r.stdout


# ------------------------------------------------------------------ multi-node: one Slurm path
def _slurm_text(path: str, variant: str | None = None) -> str:
    from recipectl.render.targets import render_slurm

    (script,) = render_slurm(build_deployment(load_variant(path, variant).recipe))
    return script.text


def _multi_node_shape(text: str) -> dict:
    """What the multi-node path writes into an sbatch script, recipe values left out."""
    return {
        "node list": 'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")' in text,
        "steps by node": sorted(set(re.findall(r'--nodelist="\$\{NODES\[(\d+)\]\}"', text))),
        "side channel per node": sorted(set(re.findall(r'VLLM_NIXL_SIDE_CHANNEL_HOST="\$\{NODES\[(\d+)\]\}"', text))),
        "listen": sorted(set(re.findall(r"--host (\S+)", text))),
        "workers by node name": bool(re.search(r'--(prefill|decode) "http://\$\{NODES\[\d+\]\}:\d+"', text)),
        "health by node name": bool(re.search(r'wait_healthy "http://\$\{NODES\[\d+\]\}:\d+/health"', text)),
        "router url by node name": bool(
            re.search(r'echo "http://\$\{NODES\[\d+\]\}:\d+" >"\$LOG_DIR/router_url"', text)
        ),
        "no requeue": "#SBATCH --no-requeue" in text,
    }


def test_two_node_cpu_recipe_renders_through_the_gb200_multi_node_path():
    """The two-node CPU recipe (launched on a real two-node Slurm by test_e2e_slurm_multinode) and
    the GB200 recipe come out of one template path: the job's node list, one srun step per node
    index, each node's name as its NIXL side-channel host, servers on every interface, the router
    and the health checks reaching workers by node name. Only the resources differ (GPUs)."""
    cpu = _multi_node_shape(_slurm_text("recipes/local/tiny-hybrid-cpu-2node.yaml"))
    gb200 = _multi_node_shape(_slurm_text("recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml", "prefill-endpoints-4"))
    assert cpu["steps by node"] == cpu["side channel per node"] == ["0", "1"]
    assert gb200["steps by node"] == gb200["side channel per node"] == ["0", "1", "2", "3"]
    for shape in (cpu, gb200):
        shape.pop("steps by node"), shape.pop("side channel per node")
    assert (
        cpu
        == gb200
        == {
            "node list": True,
            "listen": ["0.0.0.0"],
            "workers by node name": True,
            "health by node name": True,
            "router url by node name": True,
            "no requeue": True,
        }
    )


def test_cpu_endpoints_alternate_over_the_nodes():
    """CPU endpoints go round-robin over both roles: prefill node 0, decode node 1 on two nodes;
    the local recipe's one host keeps both."""
    two = build_deployment(load_variant("recipes/local/tiny-hybrid-cpu-2node.yaml", None).recipe)
    assert {p.name: p.node for p in two.processes} == {"prefill-0": 0, "decode-0": 1, "router": 0}
    assert isinstance(dict(two.processes[1].env)["VLLM_NIXL_SIDE_CHANNEL_HOST"], NodeAddress)
    one = build_deployment(load_variant("recipes/local/tiny-hybrid-cpu.yaml", None).recipe)
    assert {p.node for p in one.processes} == {0}


def test_multi_node_dp_leader_renders_no_start_rank():
    """A start rank on a process that is not --headless makes vLLM use hybrid load balancing and
    refuse the headless followers ("Remote engine 4 must not use --headless in external or hybrid
    dp lb mode", vLLM 0.32, seen on a real two-node Slurm): the leader leaves it at its default, 0;
    each follower says its own."""
    dep = build_deployment(load_variant("recipes/gb200/qwen3.5-397b-nvfp4-pd.yaml", "prefill-endpoints-4").recipe)
    leader, follower = [p for p in dep.workers if p.kind == "decode"]
    assert "--data-parallel-start-rank" not in leader.argv and "--headless" not in leader.argv
    assert leader.argv[leader.argv.index("--data-parallel-size-local") + 1] == "4"
    assert follower.argv[follower.argv.index("--data-parallel-start-rank") + 1] == "4"
    assert "--headless" in follower.argv
