"""The rule registry itself: every rule documented, with a fix and a source; docs/rules.md fresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipectl.diagnostics import Category, Severity
from recipectl.ruledocs import rule_page, rules_markdown
from recipectl.rules import all_rules
from recipectl.rules.registry import REGISTRY, Violation, rule

ROOT = Path(__file__).resolve().parent.parent


def test_every_rule_is_complete():
    rules = all_rules()
    assert len(rules) >= 30
    for r in rules:
        assert r.source and r.applies and r.title
        for section in ("What it checks", "Why", "Example", "Fix"):
            assert r.doc[section].strip(), (r.code, section)
        assert r.code in rule_page(r)


def test_codes_and_names_are_unique():
    rules = all_rules()
    assert len({r.code for r in rules}) == len(rules)
    assert len({r.name for r in rules}) == len(rules)


def test_malformed_rules_are_refused():
    try:

        @rule(
            code="ZZZ901",
            name="test.bad-doc",
            title="t",
            severity=Severity.ERROR,
            category=Category.CRASH,
            applies="x",
            source="y",
        )
        def bad(ctx):
            """What it checks: nothing."""
            yield Violation("a", "b", "c")

        # sections are parsed when the page is asked for; test_every_rule_is_complete asks for all
        with pytest.raises(TypeError, match="lacks section"):
            _ = REGISTRY["ZZZ901"].doc
    finally:
        REGISTRY.pop("ZZZ901", None)
    with pytest.raises(TypeError, match="no docstring"):

        @rule(
            code="ZZZ902",
            name="test.no-doc",
            title="t",
            severity=Severity.ERROR,
            category=Category.CRASH,
            applies="x",
            source="y",
        )
        def undocumented(ctx):
            yield Violation("a", "b", "c")

    with pytest.raises(TypeError, match="must look like"):

        @rule(
            code="bad",
            name="test.bad-code",
            title="t",
            severity=Severity.ERROR,
            category=Category.CRASH,
            applies="x",
            source="y",
        )
        def bad2(ctx):
            yield Violation("a", "b", "c")

    with pytest.raises(TypeError, match="registered twice"):

        @rule(
            code="HYB001",
            name="test.dup",
            title="t",
            severity=Severity.ERROR,
            category=Category.CRASH,
            applies="x",
            source="y",
        )
        def dup(ctx):
            """What it checks:
            x
            Why:
            x
            Example:
            x
            Fix:
            x
            """
            yield Violation("a", "b", "c")


def test_docs_rules_md_is_current():
    current = (ROOT / "docs" / "rules.md").read_text()
    assert current == rules_markdown(), "docs/rules.md is stale: python -m recipectl.ruledocs > docs/rules.md"


def test_severity_follows_evidence():
    """An `error` rule names a crash, a refusal, a corruption or a leaked credential; the registry
    refuses any other, and the policy heads docs/rules.md."""
    from recipectl.rules.registry import ERROR_CATEGORIES, SEVERITY_POLICY

    assert all(r.category in ERROR_CATEGORIES for r in all_rules() if r.severity is Severity.ERROR)
    with pytest.raises(TypeError, match="errors are for"):
        rule(
            code="ZZZ902",
            name="zzz.performance-error",
            title="t",
            severity=Severity.ERROR,
            category=Category.PERFORMANCE,
            applies="a",
            source="s",
        )(_documented)
    assert SEVERITY_POLICY in (ROOT / "docs" / "rules.md").read_text()


def _documented(ctx):
    """What it checks:
    x

    Why:
    x

    Example:
        x: 1

    Fix:
        x: 2
    """
    return iter(())


# ------------------------------------------------------------------ render targets, launchers, importers


def test_render_target_choices_and_help_come_from_the_registry(recipectl_in_process):
    """`render -t` accepts exactly the registered targets (the first the default) and its help
    names each with the files it writes: a new target is one registry entry."""
    from recipectl.render.registry import TARGETS

    recipe = str(Path(__file__).resolve().parent.parent / "recipes/local/tiny-hybrid-cpu.yaml")
    code, out, err = recipectl_in_process("render", "--help")
    assert code == 0
    help_text = " ".join((out + err).split()).replace("│ ", "").replace(" │", "")
    for t in TARGETS.values():
        assert f"{t.name} ({t.files})" in " ".join(help_text.split()), help_text
    code, _, err = recipectl_in_process("render", recipe, "-t", "ssh")
    assert code == 2 and all(f"'{name}'" in err for name in TARGETS), err
    assert tuple(TARGETS) == ("bash", "slurm", "k8s")
    code, out, _ = recipectl_in_process("render", recipe)  # the first target is the default
    assert code == 0 and "the processes of host" in out.splitlines()[1], out[:300]  # bash's header, not Slurm's


@pytest.mark.parametrize("name, suffix", [("bash", ".sh"), ("slurm", ".sbatch"), ("k8s", ".k8s.yaml")])
def test_each_render_target_writes_the_files_it_declares(name, suffix):
    """Each entry's renderer resolves, is documented (its page), and writes what the entry says."""
    from recipectl.render.processes import build_deployment
    from recipectl.render.registry import TARGETS
    from recipectl.render.targets import render
    from recipectl.validate import load_one

    t = TARGETS[name]
    assert t.doc.splitlines()[0]
    recipe = load_one(str(ROOT / "recipes" / "local" / "tiny-hybrid-cpu.yaml")).recipe
    files = render(build_deployment(recipe), name)
    assert files and all(f.name.startswith(recipe.name + ".") and f.name.endswith(suffix) for f in files)
    assert t.files.endswith(suffix) or suffix in t.files


def test_malformed_render_targets_are_refused():
    from recipectl.render.registry import TARGETS, Target, register

    with pytest.raises(TypeError, match="registered twice"):
        register(Target("bash", "x.sh", "recipectl.render.targets:render_bash"))
    with pytest.raises(TypeError, match="lower-case"):
        register(Target("Bash Script", "x.sh", "recipectl.render.targets:render_bash"))
    with pytest.raises(TypeError, match="must look like"):
        register(Target("zz-ref", "x.sh", "render_bash"))
    with pytest.raises(TypeError, match="which files"):
        register(Target("zz-files", " ", "recipectl.render.targets:render_bash"))
    try:  # a renderer without a docstring is refused when it is first resolved
        with pytest.raises(TypeError, match="no docstring"):
            _ = register(Target("zz-undocumented", "x", "recipectl.render.targets:_umask")).render
    finally:
        TARGETS.pop("zz-undocumented", None)
    assert tuple(TARGETS) == ("bash", "slurm", "k8s")


def test_launchers_follow_the_protocol_the_code_calls():
    """Every registered launcher is a Launcher, and its launch() takes what `recipectl launch`
    passes (launch_target calls it by keyword)."""
    import inspect

    from recipectl.launch.launchers import LAUNCHERS
    from recipectl.launch.result import Launcher

    assert tuple(LAUNCHERS) == ("local", "slurm")
    expected = inspect.signature(Launcher.launch)
    for name, launcher in LAUNCHERS.items():
        assert isinstance(launcher, Launcher) and launcher.name == name and launcher.interrupted
        assert inspect.signature(type(launcher).launch).parameters.keys() == expected.parameters.keys()


def test_launch_chooses_the_launcher_by_its_key(monkeypatch, capsys):
    """launch_target runs the registered launcher of that name and says what its Ctrl-C did; an
    unknown name is a usage error listing the registered ones."""
    from recipectl.commands import launch as launch_cmd
    from recipectl.errors import ExitCode, RecipectlError
    from recipectl.launch.launchers import LAUNCHERS, get_launcher

    calls = []

    class Fake:
        """A launcher that is interrupted at once."""

        name = "fake"
        interrupted = "nothing was started"

        def launch(self, recipe_path, recipe, *, detach, timeout_s, display, check_first=True):
            calls.append((recipe_path, detach, timeout_s, check_first))
            raise KeyboardInterrupt

    monkeypatch.setitem(LAUNCHERS, "fake", Fake())
    rc = launch_cmd.launch_target("fake", "r.yaml", None, detach=True, timeout=5.0, as_json=False, preflight=False)
    assert rc == int(ExitCode.INTERRUPTED) and calls == [("r.yaml", True, 5.0, False)]
    assert "interrupted: nothing was started" in capsys.readouterr().err
    monkeypatch.delitem(LAUNCHERS, "fake")
    with pytest.raises(RecipectlError, match="unknown target 'k8s'") as e:
        get_launcher("k8s")
    assert e.value.fix == "--target local or --target slurm"


def test_malformed_launchers_are_refused():
    from recipectl.launch.launchers import LAUNCHERS, LocalLauncher
    from recipectl.launch.registry import register

    class Undocumented(LocalLauncher):
        name = "zz-undocumented"

    class NoLaunch:
        """Not a launcher: no launch()."""

        name = "zz-nolaunch"
        interrupted = "x"

    with pytest.raises(TypeError, match="registered twice"):
        register(LocalLauncher())
    with pytest.raises(TypeError, match="not a Launcher"):
        register(NoLaunch())
    Undocumented.__doc__ = None
    with pytest.raises(TypeError, match="no docstring"):
        register(Undocumented())
    Undocumented.name, Undocumented.__doc__ = "Bad Name", "x"
    with pytest.raises(TypeError, match="lower-case"):
        register(Undocumented())
    assert tuple(LAUNCHERS) == ("local", "slurm")


def test_importers_are_sniffed_in_registration_order():
    """A Dynamo manifest whose shell script runs `vllm serve` is Dynamo's: the first importer
    whose sniff says yes reads the file; each reader resolves and is documented."""
    from recipectl.formats import FORMATS, IMPORTERS, NATIVE, sniff

    assert FORMATS == tuple(IMPORTERS) == ("dynamo", "srt-slurm", "vllm-serve")
    both = (
        "apiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nspec:\n  services:\n"
        "    decode:\n      extraPodSpec:\n        mainContainer:\n          args:\n            - |\n"
        "              vllm serve Qwen/Qwen3.5-27B\n"
    )
    assert sniff(both, "graph.yaml") == "dynamo"
    assert sniff("vllm serve Qwen/Qwen3.5-27B --port 8100\n", "serve.sh") == "vllm-serve"
    assert sniff("version: 1\nvllm serve x\n", "r.yaml") == sniff("hello\n", "x.txt") == NATIVE
    for importer in IMPORTERS.values():
        assert importer.help and callable(importer.read)


def test_an_unrecognised_file_lists_the_registered_formats(tmp_path):
    import subprocess
    import sys

    from recipectl.formats import IMPORTERS

    f = tmp_path / "notes.txt"
    f.write_text("just some notes\n")
    r = subprocess.run(
        [sys.executable, "-m", "recipectl", "import", str(f)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "not a format recipectl imports" in r.stderr
    for importer in IMPORTERS.values():
        assert f"{importer.name} ({importer.help})" in r.stderr


def test_malformed_importers_are_refused():
    from recipectl.formats import IMPORTERS, Importer, register

    def sniff(text, file):
        return False

    with pytest.raises(TypeError, match="registered twice"):
        register(Importer("dynamo", sniff, "recipectl.formats.dynamo:import_dynamo"))
    with pytest.raises(TypeError, match="not 'recipectl'"):
        register(Importer("recipectl", sniff, "recipectl.formats.dynamo:import_dynamo"))
    with pytest.raises(TypeError, match="must look like"):
        register(Importer("zz-ref", sniff, "dynamo.import_dynamo"))
    with pytest.raises(TypeError, match="sniff is a function"):
        register(Importer("zz-sniff", None, "recipectl.formats.dynamo:import_dynamo"))
    assert tuple(IMPORTERS) == ("dynamo", "srt-slurm", "vllm-serve")


def test_validate_imports_no_importer_and_no_renderer():
    """The registries are read on every validate; the importers and renderers they name are
    imported only for a file or a target that needs them."""
    from .test_startup_imports import GB200, _imported_modules

    mods = _imported_modules("validate", GB200)
    assert "recipectl.formats" in mods and "recipectl.render.registry" in mods
    loaded = mods & {
        "recipectl.formats.dynamo",
        "recipectl.formats.srt_slurm",
        "recipectl.formats.commandline",
        "recipectl.formats.common",
        "recipectl.render.targets",
        "recipectl.render.processes",
    }
    assert not loaded, sorted(loaded)
