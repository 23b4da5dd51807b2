"""A recipe is data, never code, on every target.

Property: for every string field of the schema and a value full of shell and YAML metacharacters,
newlines, quotes and unicode, either the schema rejects it naming the field (exit 2), or
- the rendered bash and sbatch scripts, run with stand-ins for vllm, vllm-router, srun, scontrol and
  curl that record their argv and environment (in a temporary directory, with a fake HOME), give
  every process exactly the argv and environment the deployment says, and create no file;
- the rendered manifests have the documents, kinds and keys of a benign render.
Plus regression cases for what a review found: quoting, comments, bind addresses.
"""

from __future__ import annotations

import copy
import enum
import os
import stat
import subprocess
import types
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from recipectl.loader import load_text
from recipectl.render.processes import Deployment, build_deployment
from recipectl.render.targets import environment, render, required_env, write
from recipectl.render.values import EnvRef, HomePath, NodeAddress, UrlOf, Var, concat, parse_env_value, quote
from recipectl.schema import Recipe

ROOT = Path(__file__).resolve().parent.parent
BASE = yaml.safe_load((ROOT / "tests" / "rule_cases" / "_bases.yaml").read_text())["cpu"]
CANARY = "PWNED"


# ---------------------------------------------------------------------------------------------------
# every string field of the schema


def _unwrap(ann):
    """(kind, model) of an annotation: 'str', 'list', 'dict', 'model' or None (not free text)."""
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        kinds = [_unwrap(a) for a in typing.get_args(ann) if a is not type(None)]
        return next((k for k in kinds if k[0]), (None, None))
    if ann is str:
        return "str", None
    if origin is list and typing.get_args(ann)[0] is str:
        return "list", None
    if origin is dict and typing.get_args(ann)[0] is str:
        return "dict", None
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "model", ann
    if isinstance(ann, type) and issubclass(ann, enum.Enum) or origin is typing.Literal:
        return None, None
    return None, None


def string_fields(model=Recipe, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for name, f in model.model_fields.items():
        kind, sub = _unwrap(f.annotation)
        path = prefix + name
        if kind == "model":
            out += string_fields(sub, path + ".")
        elif kind and name != "matrix":  # matrix keys are field paths of the recipe itself
            out.append((path, kind))
    return out


FIELDS = string_fields()


def test_the_property_covers_the_schemas_text_fields():
    paths = {p for p, _ in FIELDS}
    assert {
        "name",
        "description",
        "model.path",
        "model.served_name",
        "engine.vllm_version",
        "engine.image",
        "engine.env",
        "engine.serve_command",
        "cluster.hosts",
        "prefill.env",
        "decode.extra_args",
        "router.extra_args",
        "kv_transfer.backends",
        "launch.run_dir",
    } <= paths


# ---------------------------------------------------------------------------------------------------
# stand-ins

RECORDER = r"""#!/usr/bin/env bash
# records argv (NUL-separated) and environment, then waits until every expected process recorded
d="$ARGV_DIR"
env -0 >"$d/.$$.env"
printf '%s\0' "${0##*/}" "$@" >"$d/.$$.tmp" && mv "$d/.$$.env" "$d/$$.env" && mv "$d/.$$.tmp" "$d/$$.argv"
for _ in $(seq 250); do
  n=0; for f in "$d"/*.argv; do [[ -e $f ]] && n=$((n + 1)); done
  ((n >= EXPECTED)) && exit 0
  sleep 0.02
done
"""
SRUN = '#!/usr/bin/env bash\nwhile [[ $# -gt 0 && $1 == -* ]]; do shift; done\nexec "$@"\n'
SCONTROL = "#!/usr/bin/env bash\nprintf '%s\\n' node-a\n"


def fake_bin(root: Path) -> Path:
    bin_dir = root / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in {
        "vllm": RECORDER,
        "vllm-router": RECORDER,
        "srun": SRUN,
        "scontrol": SCONTROL,
        "curl": "#!/bin/sh\nexit 0\n",
        "scancel": "#!/bin/sh\nexit 0\n",
    }.items():
        p = bin_dir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def run_script(script: Path, root: Path, expected: int, extra: dict[str, str]) -> list[tuple[list[str], dict]]:
    argv_dir = root / f"argv-{script.suffix.lstrip('.')}"
    argv_dir.mkdir()
    env = {
        "PATH": f"{root / 'fakebin'}:{os.environ['PATH']}",
        "HOME": str(root),
        "ARGV_DIR": str(argv_dir),
        "EXPECTED": str(expected),
        "LOG_DIR": str(root / "logs" / script.name),
        "READY_TIMEOUT": "20",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "node-a",
        "SLURM_SUBMIT_DIR": str(root),
        **extra,
    }
    r = subprocess.run(["bash", str(script)], env=env, cwd=root, capture_output=True, timeout=60)
    out = []
    for p in sorted(argv_dir.glob("*.argv")):
        argv = [a.decode() for a in p.read_bytes().split(b"\0")[:-1]]
        pairs = [e.decode() for e in p.with_suffix(".env").read_bytes().split(b"\0") if e]
        out.append((argv, dict(e.split("=", 1) for e in pairs)))
    assert len(out) == expected, f"{script.name} rc={r.returncode}\n{r.stderr.decode(errors='replace')}"
    return out


def resolve(value, home: Path, env: dict[str, str], address) -> str:
    if isinstance(value, HomePath):
        return os.path.join(str(home), value.rest)
    if isinstance(value, NodeAddress):
        return address(value.node)
    if isinstance(value, UrlOf):
        return f"http://{address(value.node)}:{value.port}"
    if isinstance(value, EnvRef):
        return env[value.name]
    return value


def check_scripts(dep: Deployment, root: Path) -> None:
    fake_bin(root)
    hosts = dep.recipe.cluster.host_names
    refs = {n: f"value of {n}" for n in required_env(dep) if n not in ("HOME", "PATH")}
    run_env = {"HOME": str(root), **refs}
    for target in ("bash", "slurm"):
        scripts = write(render(dep, target), root / "out" / target)
        for script in scripts:
            r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        procs = dep.processes if target == "slurm" else dep.on_node(dep.nodes_used[0])
        assert len(scripts) == 1  # one host
        records = run_script(scripts[0], root, len(procs), refs)
        want = sorted([resolve(a, root, run_env, lambda n: hosts[n]) for a in p.argv] for p in procs)
        assert sorted(argv for argv, _ in records) == want
        for p in procs:
            argv = [resolve(a, root, run_env, lambda n: hosts[n]) for a in p.argv]
            (env,) = [e for a, e in records if a == argv][:1] or [None]
            assert env is not None, p.name
            for k, v in p.env:
                if target == "slurm" and k == "CUDA_VISIBLE_DEVICES":
                    continue
                assert env.get(k) == resolve(v, root, run_env, lambda n: hosts[n]), (p.name, k)
    allowed = {"fakebin", "out", "logs", "argv-sh", "argv-sbatch", "recipe.yaml"}
    assert {p.name for p in root.iterdir()} <= allowed, sorted(p.name for p in root.iterdir())
    assert not any(CANARY in p.name for p in root.rglob("*"))


def shape(node):
    """Documents, kinds and keys: dict keys and list lengths of dicts; scalars by type."""
    if isinstance(node, dict):
        return {k: shape(v) for k, v in node.items()}
    if isinstance(node, list):
        return [shape(x) for x in node] if any(isinstance(x, dict) for x in node) else "list"
    return type(node).__name__


def k8s_shape(dep: Deployment) -> list:
    (f,) = render(dep, "k8s")
    return [shape(d) for d in yaml.safe_load_all(f.text)]


# ---------------------------------------------------------------------------------------------------
# the property

PIECES = [
    "$(touch PWNED)",
    "`touch PWNED`",
    "; touch PWNED #",
    "&& touch PWNED",
    "| touch PWNED",
    "'",
    '"',
    "\\",
    "$HOME",
    "${HOME}",
    "$$",
    "$(",
    "!",
    "*",
    "?",
    "~",
    "{a,b}",
    "#",
    "<",
    ">",
    "%",
    "=",
    ":",
    ": ",
    "- ",
    "---",
    "...",
    "&anchor",
    "*alias",
    "!!python/object:os.system",
    "{x: 1}",
    "[1, 2]",
    "null",
    "true",
    "0x1",
    "1e3",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\x00",
    "\x1b[2J",
    "\u2028",
    "\u202e",
    "é",
    "混",
    "\U0001f600",
    "-",
    "--",
    "/",
    "../",
    ".",
    "a",
    "Z9",
    "_",
]
values = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=3)), min_size=1, max_size=5).map("".join)
names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)
BENIGN = ["benign", "0.32.0", "vllm/vllm-openai:v0.32.0", "127.0.0.1"]


def apply(data: dict, field: str, kind: str, value: str, key: str | None) -> None:
    *parents, last = field.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {})
    if kind == "str":
        node[last] = value
    elif kind == "dict":
        node[last] = {key: value} if key else {value: "1"}
    elif field == "cluster.hosts":
        node[last] = [value]
    elif field.endswith("cpu_cores"):
        node[last] = [value]
    elif field.endswith("_command"):
        node[last] = {"serve_command": ["vllm", "serve"], "router_command": ["vllm-router"]}.get(last, ["x"]) + [value]
    else:
        node[last] = list(node.get(last) or []) + [value]


def load(data: dict):
    return load_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), "fuzz.yaml")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=values, key=st.one_of(st.none(), names))
def test_a_value_is_rejected_at_its_field_or_passed_as_data(tmp_path_factory, field, value, key):
    path, kind = field
    assume(
        key
        not in (
            "PATH",
            "HOME",
            "IFS",
            "ARGV_DIR",
            "EXPECTED",
            "LOG_DIR",
            "READY_TIMEOUT",
            "BASH_ENV",
            "ENV",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "SHELLOPTS",
        )
    )
    data = copy.deepcopy(BASE)
    apply(data, path, kind, value, key)
    result = load(data)
    if not result.ok:
        event("rejected")
        found = [d.path for d in result.diagnostics]
        assert any(d and (path == d or path.startswith(d + ".") or d.startswith(path)) for d in found), (
            path,
            value,
            found,
        )
        return
    event("accepted")
    (loaded,) = result.recipes
    dep = build_deployment(loaded.recipe)
    if path != "engine.venv":  # the stand-ins live on PATH, not in a venv
        check_scripts(dep, tmp_path_factory.mktemp("run"))
    ref = kind == "dict" and key and isinstance(parse_env_value(value), EnvRef)
    if (
        ref
        or path in ("engine.serve_command", "engine.router_command", "engine.venv")
        or path.endswith(("extra_args", "cpu_cores"))
        or kind == "dict"
        and path in ("ignore",)
    ):
        return  # the value itself changes the argv or env structure (a reference, a program, an arg)
    for benign in BENIGN:
        other = copy.deepcopy(BASE)
        apply(other, path, kind, benign, key)
        r = load(other)
        if r.ok:
            assert k8s_shape(dep) == k8s_shape(build_deployment(r.recipes[0].recipe)), (path, value)
            break


# ---------------------------------------------------------------------------------------------------
# regression cases


def test_the_environment_quotes_every_value_it_writes():
    t = environment().from_string("{{ v }} {{ n }}")
    assert t.render(v="$(touch x)", n=3) == "'$(touch x)' 3"
    assert t.render(v="a b`c`", n=0) == "'a b`c`' 0"
    with pytest.raises(ValueError, match="control character"):
        t.render(v="a\nb", n=1)
    with pytest.raises(TypeError):
        t.render(v=None, n=1)


def test_words_are_built_from_quoted_parts():
    node = Var("${NODES[0]}")
    assert concat("http://", node, ":8100/health") == '"http://${NODES[0]}:8100/health"'
    assert concat("http://", "$(touch x)", ":1") == "http://'$(touch x)':1"
    assert concat("http://", node, ":1 $(x)") == "http://\"${NODES[0]}\"':1 $(x)'"
    assert quote("it's") == "'it'\"'\"'s'"
    with pytest.raises(ValueError):
        Var("$(touch x)")
    with pytest.raises(ValueError):
        quote("x\ny")


def test_a_host_inside_urls_and_the_router_url_is_a_quoted_literal(tmp_path):
    """The Slurm wait URLs and router URL, and the GPU recipes' URLs, carry the host as a quoted word."""
    data = copy.deepcopy(BASE)
    data["cluster"]["hosts"] = ["node-1.example"]
    (loaded,) = load(data).recipes
    (sbatch,) = render(build_deployment(loaded.recipe), "slurm")
    assert 'wait_healthy "http://node-1.example:8100/health"' in sbatch.text
    assert 'echo "http://node-1.example:30000" >"$LOG_DIR/router_url"' in sbatch.text


def test_k8s_comment_and_values_stay_data():
    data = copy.deepcopy(BASE)
    data["model"]["path"] = "/m/x: y\n---\nkind: Pod".replace("\n", " ")
    (loaded,) = load(data).recipes
    (f,) = render(build_deployment(loaded.recipe), "k8s")
    header = f.text.split("\n---\n")[0]
    assert '"/m/x: y --- kind: Pod"' in header.splitlines()[0]
    docs = list(yaml.safe_load_all(f.text))
    assert [d["kind"] for d in docs] == ["Service", "Deployment"] * 3


@pytest.mark.parametrize(
    "hosts,want",
    [
        (["127.0.0.1"], {"127.0.0.1"}),
        (None, {"0.0.0.0"}),
        (["gpu-a.example", "gpu-b.example"], {"gpu-a.example", "gpu-b.example"}),
    ],
)
def test_servers_and_router_bind_to_the_recipes_hosts(hosts, want):
    data = copy.deepcopy(yaml.safe_load((ROOT / "tests" / "rule_cases" / "_bases.yaml").read_text())["dense_gpu"])
    nodes = len(hosts or [1, 2])
    data["cluster"].update(nodes=nodes, gpus_per_node=4 // nodes)
    if hosts:
        data["cluster"]["hosts"] = hosts
    (loaded,) = load(data).recipes
    dep = build_deployment(loaded.recipe)
    binds = {}
    for p in dep.processes:
        argv = list(p.argv)
        binds[p.name] = argv[argv.index("--host") + 1]
        if hosts:
            assert binds[p.name] == p.host, p.name  # each on its own host
    assert set(binds.values()) == want
    (f,) = render(dep, "k8s")  # in a pod: the pod's interfaces, the Service in front
    for d in yaml.safe_load_all(f.text):
        if d["kind"] == "Deployment":
            args = d["spec"]["template"]["spec"]["containers"][0]["args"]
            assert args[args.index("--host") + 1] == "0.0.0.0"


def test_the_loopback_gpu_recipe_stays_on_loopback():
    from recipectl.validate import load_variant

    dep = build_deployment(load_variant(str(ROOT / "recipes" / "h200" / "tiny-qwen35-pd.yaml"), None).recipe)
    assert {list(p.argv)[list(p.argv).index("--host") + 1] for p in dep.processes} == {"127.0.0.1"}
