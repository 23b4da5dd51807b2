"""The table of vLLM's version-dependent facts (recipectl/data/engine-facts.yaml): it loads, every
row names its evidence in vLLM's code, and `holds` answers by its releases."""

from __future__ import annotations

import pytest

from recipectl import engine_facts
from recipectl.engine_facts import Fact, fact, facts, holds, newest_release, releases


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


@pytest.mark.parametrize(("fact_id", "version", "expected"), [
    ("hybrid-prefix-caching-default-on", (0, 27, 0), False),
    ("hybrid-prefix-caching-default-on", (0, 28, 0), True),
    ("nixl-ssm-one-local-block-assert", (0, 22, 1), False),
    ("nixl-ssm-one-local-block-assert", (0, 23, 0), True),
    ("nixl-ssm-one-local-block-assert", (0, 26, 9), True),
    ("nixl-ssm-one-local-block-assert", (0, 27, 0), False),
    ("gdn-prefill-backend-cutedsl", (0, 21, 0), False),
    ("gdn-prefill-backend-cutedsl", (0, 22, 0), True),
    ("hybrid-prefix-caching-default-on", None, None),
])
def test_holds_by_since_and_until(fact_id, version, expected):
    assert holds(fact_id, version) is expected


def test_unknown_id_is_a_key_error():
    with pytest.raises(KeyError):
        fact("no-such-fact")


def test_a_row_without_exactly_one_check_is_refused():
    with pytest.raises(ValueError, match="exactly one of"):
        engine_facts._fact({"id": "x", "kind": "default", "what": "w", "evidence": [
            {"file": "vllm/envs.py", "symbol": "X", "contains": "a", "lacks": "b"}]})
    with pytest.raises(ValueError, match="not after since"):
        engine_facts._fact({"id": "x", "kind": "default", "what": "w", "since": "0.27.0", "until": "0.27.0",
                            "evidence": [{"file": "vllm/envs.py", "symbol": "X", "contains": "a"}]})


def test_releases_text_for_messages():
    assert fact("nixl-ssm-one-local-block-assert").releases == "0.23.0 – 0.26.x"
    assert fact("hybrid-prefix-caching-default-on").releases == "from 0.28.0"
    assert isinstance(fact("gdn-pd-nixl"), Fact)
