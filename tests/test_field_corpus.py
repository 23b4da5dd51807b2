"""The field corpus (tests/field/): published hybrid P/D recipes in the peers' formats (srt-slurm,
Dynamo) and as vllm serve command lines, each with the findings the evidence says it should get.

Per file, written down before any rule changes:
- `bad`: what its publisher reports as broken (a peer's own known issues, an upstream issue), with
  the code and severity that must catch it. Code "*" is a rule that does not exist yet (matched by
  severity and field path).
- `expect`: the other findings it must get (what cannot be proven, deprecations, advice).
- `never`: findings it must not get (code, path): a rule broader than its source.
A recipe its publisher ran successfully has no `bad` and must have no `error` finding.

Where today's rules disagree with the evidence, the check is marked xfail(strict) naming the rule
that is wrong and why: that list is what the rules must fix. Findings beyond `bad` + `expect`
that are warnings or infos are tolerated (advice the rules may add).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from recipectl.diagnostics import Severity
from recipectl.validate import validate_file

ROOT = Path(__file__).resolve().parent.parent
FIELD = Path(__file__).parent / "field"
E, W, I = "error", "warning", "info"  # noqa: E741


@dataclass(frozen=True)
class Expect:
    file: str
    bad: tuple[tuple[str, str, str], ...] = ()  # (code or "*", severity, field path glob)
    expect: tuple[tuple[str, str, str], ...] = ()
    never: tuple[tuple[str, str], ...] = ()  # (code, field path glob)
    # today's rules against the evidence: check name -> the rule that is wrong and why
    wrong: tuple[tuple[str, str], ...] = ()


# -- why today's rules are wrong (one sentence each, named by rule)
UNKNOWN_VERSION = ("VER001/VER002 make an unknown vLLM version (a nightly or custom image) an error; it cannot be "
                   "proven either way, so it is a warning that says what to declare (engine.vllm_version or patches)")
PRODUCER = ("VER001 fires on prefill: the async-scheduling race is on the KV consumer (decode, vLLM #37285/#42182); "
            "prefill's async scheduling is unaffected")
KV_BOTH = ("CON003 makes kv_role kv_both an error; NIXL accepts it with a deprecation warning (srt-slurm's "
           "connector: nixl passes it; the published recipes ran with it)")
RUNTIME_TAG = ("EngineSection.version reads Dynamo's image nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0 as vLLM "
               "1.3.0 (it ships vLLM 0.23): the version gates pass silently")
RUNTIME_ADVICE = RUNTIME_TAG + ", and PRF001 then advises turning async scheduling back on for an engine without " \
                               "the race fixes"
PREFIX_DECODE = ("HYB003 is a warning: prefix caching on a hybrid P/D decode fails the first transferred request "
                 "(\"SSM can only have one local block\", ai-dynamo/dynamo#12197) — a crash, so an error")
PREFIX_PREFILL = ("no rule for prefix caching on the hybrid *prefill* (vLLM #53514, 0.27.0): HYB003 looks at decode "
                  "only")
NO_FP8_RULE = "no rule yet for an FP8 KV cache on Qwen3.5 NVFP4 P/D (vLLM #42179: corrupted output)"
NO_RECOMPUTE_RULE = "no rule yet for kv_load_failure_policy recompute hiding failed transfers (vLLM #49238)"

SEED_EXPECT = ((("VER001", W, "decode.async_scheduling"), ("VER002", W, "engine.vllm_version"),
                ("CON003", W, "prefill.kv_role"), ("CON003", W, "decode.kv_role"),
                ("OPS002", I, "router.prefill_policy")))
SEED_WRONG = (("no_false_errors", f"{UNKNOWN_VERSION}; {PRODUCER}; {KV_BOTH}"),
              ("expected", f"{UNKNOWN_VERSION}; {KV_BOTH}"),
              ("never", PRODUCER))
KV_BOTH_EXPECT = (("CON003", W, "prefill.kv_role"), ("CON003", W, "decode.kv_role"))
NEVER_PREFILL_RACE = (("VER001", "prefill.*"),)

CORPUS: tuple[Expect, ...] = (
    # ---------------------------------------------------------------- srt-slurm (NVIDIA/srt-slurm)
    Expect("srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=SEED_WRONG),
    Expect("srt-slurm/qwen35-397b-gb200-8xdep2-1xdep8-cc5120.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=SEED_WRONG),
    Expect("srt-slurm/qwen35-397b-gb200-6xdep2-1xdep8-acc.yaml", expect=SEED_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=SEED_WRONG),
    Expect("srt-slurm/qwen35-397b-gb200-5xdep2-1xdep8-v0.26.yaml",
           expect=KV_BOTH_EXPECT + (("OPS002", I, "router.prefill_policy"),),
           never=(("VER001", "*"), ("VER002", "*")),
           wrong=(("no_false_errors", KV_BOTH), ("expected", KV_BOTH))),
    Expect("srt-slurm/known-bad-decode-without-ds-layout.yaml",
           bad=(("HYB001", E, "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"),), expect=SEED_EXPECT,
           never=NEVER_PREFILL_RACE, wrong=SEED_WRONG),
    Expect("srt-slurm/known-bad-async-scheduling-vllm-0.25.yaml",
           bad=(("VER001", E, "decode.async_scheduling"),), expect=KV_BOTH_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=(("no_false_errors", f"{PRODUCER}; {KV_BOTH}"), ("expected", KV_BOTH), ("never", PRODUCER))),
    Expect("srt-slurm/known-bad-decode-prefix-caching.yaml",
           bad=(("HYB003", E, "decode.enable_prefix_caching"),), expect=KV_BOTH_EXPECT,
           wrong=(("caught", PREFIX_DECODE), ("no_false_errors", KV_BOTH), ("expected", KV_BOTH))),
    Expect("srt-slurm/known-bad-mtp-with-ds-layout.yaml",
           bad=(("HYB004", E, "decode.speculative_config"),), expect=SEED_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=SEED_WRONG),
    Expect("srt-slurm/known-bad-fp8-kv-cache-nvfp4.yaml",
           bad=(("*", E, "*.kv_cache_dtype"),), expect=SEED_EXPECT, never=NEVER_PREFILL_RACE,
           wrong=(("caught", NO_FP8_RULE),) + SEED_WRONG),
    # ---------------------------------------------------------------- Dynamo (ai-dynamo/dynamo)
    Expect("dynamo/qwen35-397b-fp8-h100-disagg.yaml",
           expect=(("VER002", W, "engine.vllm_version"), ("VER001", W, "decode.async_scheduling")),
           never=NEVER_PREFILL_RACE,
           wrong=(("no_false_errors", f"{UNKNOWN_VERSION}; {PRODUCER}"), ("expected", UNKNOWN_VERSION),
                  ("never", PRODUCER))),
    Expect("dynamo/qwen35-27b-h100-disagg-tp1-async-off.yaml",
           expect=(("VER002", W, "engine.vllm_version"),),
           wrong=(("no_false_errors", UNKNOWN_VERSION), ("expected", UNKNOWN_VERSION))),
    Expect("dynamo/qwen35-35b-a3b-runtime-1.3.0-decode-async-off.yaml",
           expect=(("VER002", W, "engine.vllm_version"),), never=(("PRF001", "decode.*"),),
           wrong=(("expected", RUNTIME_TAG), ("never", RUNTIME_ADVICE))),
    Expect("dynamo/known-bad-decode-async-on-runtime-1.3.0.yaml",
           bad=(("VER001", W, "decode.async_scheduling"),), expect=(("VER002", W, "engine.vllm_version"),),
           never=NEVER_PREFILL_RACE,
           wrong=(("caught", RUNTIME_TAG), ("expected", RUNTIME_TAG))),
    Expect("dynamo/known-bad-prefill-without-ds-layout.yaml",
           bad=(("HYB001", E, "prefill.env.VLLM_SSM_CONV_STATE_LAYOUT"),),
           expect=(("VER002", W, "engine.vllm_version"),),
           wrong=(("no_false_errors", UNKNOWN_VERSION), ("expected", UNKNOWN_VERSION))),
    Expect("dynamo/known-bad-hybrid-kv-cache-manager-disabled.yaml",
           bad=(("HYB005", E, "prefill.disable_hybrid_kv_cache_manager"),
                ("HYB005", E, "decode.disable_hybrid_kv_cache_manager")),
           expect=(("VER002", W, "engine.vllm_version"),),
           wrong=(("no_false_errors", UNKNOWN_VERSION), ("expected", UNKNOWN_VERSION))),
    # ---------------------------------------------------------------- vllm serve command lines
    Expect("vllm-serve/qwen35-27b-gb200-tp1-prefill.sh",
           bad=(("VER001", W, "decode.async_scheduling"),), expect=(("VER002", W, "engine.vllm_version"),),
           never=NEVER_PREFILL_RACE,
           wrong=(("caught", UNKNOWN_VERSION), ("no_false_errors", f"{UNKNOWN_VERSION}; {PRODUCER}"),
                  ("expected", UNKNOWN_VERSION), ("never", PRODUCER))),
    Expect("vllm-serve/qwen35-27b-gb200-tp1-decode.sh",
           bad=(("VER001", W, "decode.async_scheduling"),), expect=(("VER002", W, "engine.vllm_version"),),
           never=NEVER_PREFILL_RACE,
           wrong=(("caught", UNKNOWN_VERSION), ("no_false_errors", f"{UNKNOWN_VERSION}; {PRODUCER}"),
                  ("expected", UNKNOWN_VERSION), ("never", PRODUCER))),
    Expect("vllm-serve/qwen35-35b-a3b-fp8-h100-pd.sh", never=(("PRF001", "*"),)),
    Expect("vllm-serve/known-bad-heterogeneous-tp.sh", bad=(("CON001", E, "prefill.parallel"),)),
    Expect("vllm-serve/known-bad-sd-conv-layout.sh",
           bad=(("HYB002", E, "prefill.env.VLLM_SSM_CONV_STATE_LAYOUT"),
                ("HYB002", E, "decode.env.VLLM_SSM_CONV_STATE_LAYOUT"))),
    Expect("vllm-serve/known-bad-recompute-on-load-failure.sh",
           bad=(("*", W, "kv_transfer.load_failure_policy"),), wrong=(("caught", NO_RECOMPUTE_RULE),)),
    Expect("vllm-serve/known-bad-prefill-prefix-caching-0.27.sh",
           bad=(("*", E, "prefill.enable_prefix_caching"),), wrong=(("caught", PREFIX_PREFILL),)),
)


def _findings(path: Path) -> list[tuple[str, str, str]]:
    report, _ = validate_file(path)
    assert report.valid, [d.message for d in report.diagnostics]
    return [(d.code, d.severity.value, d.path) for d in report.diagnostics]


def _matches(finding: tuple[str, str, str], want: tuple[str, str, str]) -> bool:
    code, severity, path = want
    return (code == "*" or finding[0] == code) and finding[1] == severity and fnmatch(finding[2], path)


def _params(check: str) -> list:
    out = []
    for e in CORPUS:
        reason = dict(e.wrong).get(check)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(e, id=e.file, marks=marks))
    return out


def test_corpus_is_complete():
    """Every file under tests/field has its expectations, and the corpus has at least 20 files."""
    files = sorted(str(p.relative_to(FIELD)) for p in FIELD.rglob("*") if p.is_file())
    assert files == sorted(e.file for e in CORPUS)
    assert len(files) >= 20
    for f in files:
        head = (FIELD / f).read_text().splitlines()[:3]
        assert any("Source:" in line for line in head), f"{f}: name the source in a comment at the top"


@pytest.mark.parametrize("entry", _params("caught"))
def test_known_bad_is_caught(entry: Expect):
    found = _findings(FIELD / entry.file)
    missing = [b for b in entry.bad if not any(_matches(f, b) for f in found)]
    assert not missing, f"not caught: {missing}; found {found}"


@pytest.mark.parametrize("entry", _params("no_false_errors"))
def test_no_false_errors(entry: Expect):
    """An error only where the evidence says the recipe breaks."""
    errors = [f for f in _findings(FIELD / entry.file) if f[1] == Severity.ERROR.value]
    false = [f for f in errors if not any(_matches(f, b) for b in entry.bad)]
    assert not false, f"errors the evidence does not support: {false}"


@pytest.mark.parametrize("entry", _params("expected"))
def test_expected_findings(entry: Expect):
    found = _findings(FIELD / entry.file)
    missing = [x for x in entry.expect if not any(_matches(f, x) for f in found)]
    assert not missing, f"missing: {missing}; found {found}"


@pytest.mark.parametrize("entry", _params("never"))
def test_never_findings(entry: Expect):
    found = _findings(FIELD / entry.file)
    wrong = [f for f in found for code, path in entry.never if f[0] == code and fnmatch(f[2], path)]
    assert not wrong, f"findings broader than their source: {wrong}"


def _recipectl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.mark.parametrize("entry", CORPUS, ids=[e.file for e in CORPUS])
def test_validate_exits_0_or_1_with_original_lines(entry: Expect):
    path = FIELD / entry.file
    r = _recipectl("validate", str(path.relative_to(ROOT)))
    assert r.returncode in (0, 1), r.stdout + r.stderr
    # every finding points into an original file, at a line that file has
    lines = {p.name: len(p.read_text().splitlines()) for p in path.parent.iterdir()}
    located = 0
    for line in r.stdout.splitlines():
        head = line.split(" ", 1)[0]
        if head.count(":") == 2 and head.startswith("tests/field/"):
            name, ln = head.split(":")[0].rsplit("/", 1)[-1], int(head.split(":")[1])
            assert name in lines and 1 <= ln <= lines[name], line
            located += 1
    assert located == len(_findings(path))


@pytest.mark.parametrize("entry", CORPUS, ids=[e.file for e in CORPUS])
def test_import_output_validates_the_same(entry: Expect, tmp_path):
    path = FIELD / entry.file
    out = tmp_path / "imported.yaml"
    r = _recipectl("import", str(path.relative_to(ROOT)), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "# from tests/field/" in text
    assert sorted(_findings(out)) == sorted(_findings(path))
