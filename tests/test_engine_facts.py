"""The table of vLLM's version-dependent facts (recipectl/data/engine-facts.yaml): it loads, every
row names its evidence in vLLM's code, and `holds` answers by its releases."""

from __future__ import annotations

import pytest

from recipectl import engine_facts
from recipectl.engine_facts import Fact, fact, facts, holds, newest_release, releases

from .scripts import load_script


def test_every_row_has_a_kind_evidence_and_known_releases():
    known = set(releases())
    assert len({f.id for f in facts()}) == len(facts())
    for f in facts():
        assert f.kind in engine_facts.KINDS, f.id
        assert f.evidence and all(e.file.startswith("vllm/") and e.symbol for e in f.evidence), f.id
        for bound in (f.since, f.until):
            assert bound is None or bound in known, (f.id, bound)


def test_newest_release_is_0_33():
    assert newest_release() == (0, 33, 0)
    assert list(releases()) == sorted(releases())


@pytest.mark.parametrize(
    ("fact_id", "version", "expected"),
    [
        ("hybrid-prefix-caching-default-on", (0, 27, 0), False),
        ("hybrid-prefix-caching-default-on", (0, 28, 0), True),
        ("nixl-ssm-one-local-block-assert", (0, 22, 1), False),
        ("nixl-ssm-one-local-block-assert", (0, 23, 0), True),
        ("nixl-ssm-one-local-block-assert", (0, 26, 9), True),
        ("nixl-ssm-one-local-block-assert", (0, 27, 0), False),
        ("gdn-prefill-backend-cutedsl", (0, 21, 0), False),
        ("gdn-prefill-backend-cutedsl", (0, 22, 0), True),
        ("hybrid-prefix-caching-default-on", None, None),
    ],
)
def test_holds_by_since_and_until(fact_id, version, expected):
    assert holds(fact_id, version) is expected


def test_unknown_id_is_a_key_error():
    with pytest.raises(KeyError):
        fact("no-such-fact")


def test_a_row_without_exactly_one_check_is_refused():
    with pytest.raises(ValueError, match="exactly one of"):
        engine_facts._fact(
            {
                "id": "x",
                "kind": "default",
                "what": "w",
                "evidence": [{"file": "vllm/envs.py", "symbol": "X", "contains": "a", "lacks": "b"}],
            }
        )
    with pytest.raises(ValueError, match="not after since"):
        engine_facts._fact(
            {
                "id": "x",
                "kind": "default",
                "what": "w",
                "since": "0.27.0",
                "until": "0.27.0",
                "evidence": [{"file": "vllm/envs.py", "symbol": "X", "contains": "a"}],
            }
        )


def test_code_that_moved_is_read_where_each_release_has_it():
    """0.24 moved the NIXL worker's code into NixlBaseConnectorWorker: each release is checked at
    its own place, the releases on both sides of the move are among those checked, and a row whose
    places leave a release out is refused."""
    verifier = load_script("scripts/verify-engine-facts.py")

    f = fact("nixl-prefill-tp-above-decode")
    at = {v: [e.symbol for e in f.evidence if e.applies(v)] for v in ((0, 23, 0), (0, 24, 0))}
    assert at == {
        (0, 23, 0): ["NixlConnectorWorker.add_remote_agent"],
        (0, 24, 0): ["NixlBaseConnectorWorker.add_remote_agent"],
    }
    assert {(0, 23, 0), (0, 24, 0)} <= set(verifier.checked_releases(f, releases()))
    raw = {
        "id": "x",
        "kind": "behaviour",
        "what": "w",
        "evidence": [
            {"file": "vllm/a.py", "symbol": "A", "contains": "t", "until": "0.24.0"},
            {"file": "vllm/b.py", "symbol": "B", "contains": "t", "since": "0.25.0"},
        ],
    }
    with pytest.raises(ValueError, match="no evidence for 0.24.0"):
        engine_facts._check_evidence_ranges(engine_facts._fact(raw).evidence, releases(), "x")


def test_releases_text_for_messages():
    assert fact("nixl-ssm-one-local-block-assert").releases == "0.23.0 – 0.26.x"
    assert fact("hybrid-prefix-caching-default-on").releases == "from 0.28.0"
    assert isinstance(fact("gdn-pd-nixl"), Fact)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("16k", 16_000), ("16K", 16_384), ("25.6k", 25_600), ("1m", 1_000_000), ("1M", 1_048_576), ("2048", 2048)],
)
def test_token_counts_read_as_vllms_human_readable_int(text, tokens):
    from recipectl.engine_flags import parse_extra_args

    (found,), problems = parse_extra_args(["--max-num-batched-tokens", text])
    assert (found.value, problems) == (tokens, [])


def test_a_decimal_with_a_binary_suffix_is_refused_as_vllm_refuses_it():
    from recipectl.engine_flags import parse_extra_args

    found, (problem,) = parse_extra_args(["--max-num-batched-tokens", "1.5K"])
    assert not found and "not a valid value" in problem.message


@pytest.mark.parametrize("text", ["auto", "AUTO", "-1"])
def test_max_model_len_auto_is_the_models_own_length(text):
    from recipectl.engine_flags import parse_extra_args

    (found,), problems = parse_extra_args(["--max-model-len", text])
    assert found.value is None and problems == []


def test_the_probe_gets_where_each_release_keeps_the_serve_validator_newest_first():
    from recipectl.engine_env import serve_cli_args_modules

    assert serve_cli_args_modules() == [
        "vllm.entrypoints.common.cli_args",
        "vllm.entrypoints.launchers.cli_args",
        "vllm.entrypoints.openai.cli_args",
    ]


def test_the_probe_takes_the_first_module_the_engine_has(monkeypatch):
    import sys
    import types

    from recipectl import engine_probe

    old = types.ModuleType("fake_openai_cli_args")
    old.validate_parsed_serve_args = lambda args: "0.26"
    monkeypatch.setitem(sys.modules, "fake_openai_cli_args", old)
    assert engine_probe._serve_validator(["no_such_module_033", "fake_openai_cli_args"])(None) == "0.26"
    with pytest.raises(ImportError, match="none of"):
        engine_probe._serve_validator(["no_such_module_033"])


def test_gdn_backend_choices_by_release():
    from recipectl.engine_versions import gdn_backends_for

    assert gdn_backends_for((0, 17, 1)) is None
    assert gdn_backends_for((0, 21, 0)) == {"flashinfer", "triton"}
    assert gdn_backends_for((0, 22, 0)) == {"flashinfer", "triton", "cutedsl"}
    assert gdn_backends_for((0, 33, 0)) == {"flashinfer", "triton", "cutedsl", "aiter_flydsl", "sycl"}
    assert gdn_backends_for(None) == gdn_backends_for((0, 33, 0))
