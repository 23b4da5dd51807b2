"""Doctor's checks come from one registry, as the rules do: each declared with its group, name,
time limit and what it needs; a malformed one is refused at import; the rows keep the order users
know; a failed health check skips what needs a healthy server, as data. And every kind of problem
(finding, check, diagnosis, preflight) is one type."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from recipectl.checks import doctor as registry
from recipectl.checks.catalog import all_checks
from recipectl.checks.doctor import GROUPS, STAGES, DoctorRun, Quiet, Targets, check, found, planned, run_checks
from recipectl.commands import doctor as command  # registers the lock check
from recipectl.diagnostics import CheckResult, Diagnosis, Diagnostic, Problem, Severity, Status
from recipectl.runs.diagnose import diagnose

PREFILL, DECODE, ROUTER = "http://prefill:8100", "http://decode:8200", "http://router:8000"
ALL = Targets(router=ROUTER, prefill=[PREFILL], decode=[DECODE], model="tiny")


def _run(**options) -> DoctorRun:
    return DoctorRun(None, ALL, 10, **{"parity": True, "gsm8k": True, "lock": {}, "lock_name": "r.lock", **options})


def test_every_check_is_declared_whole():
    checks = all_checks()
    assert len({c.key for c in checks}) == len(checks) >= 19
    assert "endpoints.lock" in {c.key for c in checks}  # registered by the command, above the checks' layer
    for c in checks:
        assert c.group in GROUPS and c.key.startswith(c.group + ".") and c.name.strip(), c
        assert c.stage in {s.name for s in STAGES} and c.timeout(_run()) > 0, c
        assert all(n in registry.REGISTRY for n in c.needs), c


def test_malformed_checks_are_refused_at_registration():
    async def fn(run, on):
        return found(Status.PASS, "")

    def register(**kw):
        args = {"key": "environment.test-extra", "name": "test extra", "stage": "environment", "timeout": 5, **kw}
        try:
            check(**args)(fn)
        finally:
            registry.REGISTRY.pop("environment.test-extra", None)

    with pytest.raises(TypeError, match="registered twice"):
        check(key="environment.python", name="another python", stage="environment", timeout=5)(fn)
    with pytest.raises(TypeError, match="group.slug"):
        register(key="python")
    with pytest.raises(TypeError, match="taken"):
        register(name="python")
    with pytest.raises(TypeError, match="stage"):
        register(stage="later")
    with pytest.raises(TypeError, match="timeout"):
        register(timeout=0)
    with pytest.raises(TypeError, match="not registered"):
        register(needs=("endpoints.nothing",))
    with pytest.raises(TypeError, match="beside or after"):  # health runs in a later stage
        register(needs=("endpoints.health",))
    with pytest.raises(TypeError, match="async"):
        check(key="environment.test-extra", name="test extra", stage="environment", timeout=5)(lambda run, on: None)
    assert "environment.test-extra" not in registry.REGISTRY


def test_rows_keep_the_order_users_know():
    run = _run()
    names = [c.row_name(run, s) for stage in STAGES for c, s in planned(run, stage, all_checks())]
    assert names == [
        "python",
        "vllm",
        "nixl + UCX",
        "vllm-router",
        "engine arguments",
        "GPUs",
        "role environment",
        "GDN prefill backend",
        "ports",
        "CPU cores per endpoint",
        f"health prefill {PREFILL}",
        f"health decode {DECODE}",
        f"health router {ROUTER}",
        f"models prefill {PREFILL}",
        f"version prefill {PREFILL}",
        f"metrics prefill {PREFILL}",
        f"models decode {DECODE}",
        f"version decode {DECODE}",
        f"metrics decode {DECODE}",
        f"models router {ROUTER}",
        f"lock (prefill {PREFILL})",
        f"lock (decode {DECODE})",
        "P/D transfer (NIXL)",
        "NIXL path (prefill host -> decode host)",
        "parity (P/D vs reference)",
        "GSM8K pipeline (accuracy not gated)",
    ]
    alone = DoctorRun(None, Targets(), 10, env=False)
    assert [c.key for stage in STAGES for c, _ in planned(alone, stage, all_checks())] == ["endpoints.deployment"]


def test_a_failed_health_check_skips_what_needs_a_healthy_server(monkeypatch):
    """Decode is down: the lock and the proofs are skipped, each saying which check failed, and
    no request is sent through the router."""
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.host == "decode":
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        return httpx.Response(200, json={"version": "0.32.0"}, text="")

    monkeypatch.setattr(registry, "make_client", lambda **_: httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    results = asyncio.run(run_checks(_run(env=False), all_checks(), Quiet()))
    by_name = {r.name: r for r in results}
    assert by_name[f"health decode {DECODE}"].status is Status.FAIL
    assert by_name[f"health prefill {PREFILL}"].status is Status.PASS
    skipped = [r for r in results if r.status is Status.SKIP]
    assert [r.code for r in skipped] == [
        "endpoints.lock",
        "endpoints.lock",
        "proofs.pd-transfer",
        "proofs.nixl-path",
        "proofs.parity",
        "proofs.gsm8k",
    ]
    assert all(r.message == f"skipped: health decode {DECODE} failed" for r in skipped), skipped
    assert not [u for u in asked if u.endswith("/v1/completions")], asked


def test_every_kind_of_problem_is_one_type_and_none_carries_a_credential():
    secret = "https://hf.example/m?token=abc123secret"
    finding = Diagnostic(code="HYB001", severity=Severity.ERROR, message=f"bad {secret}", fix=f"see {secret}")
    checked = CheckResult(code="endpoints.health", status=Status.FAIL, message=f"down: {secret}", fix=secret)
    cause = diagnose("CUDA out of memory")
    assert all(isinstance(p, Problem) for p in (finding, checked, cause))
    assert isinstance(cause, Diagnosis) and cause.code == "log.out-of-memory" and cause.cause == cause.message
    for p in (finding, checked):
        assert "abc123secret" not in p.message + (p.fix or "") and "token=<redacted>" in p.message, p


def test_the_json_shapes_stay_as_documented():
    """docs/json-output.md: a finding's keys, in their order; a doctor check's keys and string status."""
    d = Diagnostic(code="PRF001", severity=Severity.INFO, message="m", file="r.yaml", line=3, col=2)
    assert list(d.to_json()) == [
        "code",
        "severity",
        "message",
        "fix",
        "path",
        "file",
        "line",
        "col",
        "category",
        "source",
    ]
    assert d.to_json()["severity"] == "info" and d.location == "r.yaml:3:2"
    r = CheckResult(code="environment.python", group="environment", name="python", status=Status.PASS, message="ok")
    assert json.loads(json.dumps(r.to_json())) == {
        "group": "environment",
        "name": "python",
        "status": "pass",
        "detail": "ok",
        "fix": "",
        "seconds": 0.0,
        "data": {},
    }
    assert command.LABEL[Status.FAIL] == "FAIL"
