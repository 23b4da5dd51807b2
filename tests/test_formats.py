"""recipectl.formats: detection by content, positions in the original file, what exits 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from recipectl.formats import DYNAMO, NATIVE, SRT_SLURM, VLLM_SERVE, sniff
from recipectl.formats.shellwords import shell_words
from recipectl.loader import load_text

ROOT = Path(__file__).resolve().parent.parent
FIELD = Path(__file__).parent / "field"

PAIR = """#!/bin/bash
# on 2 x H200
export VLLM_SSM_CONV_STATE_LAYOUT=DS
pip install vllm==0.26.0
CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3.5-35B-A3B \\
  --port 8100 --no-enable-prefix-caching \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}' &
CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen3.5-35B-A3B --port 8200 \\
  --max-num-seqs 64 --some-new-flag 3 \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
wait
"""


def test_sniff_by_content():
    assert sniff((ROOT / "recipes/h200/tiny-qwen35-pd.yaml").read_text()) == NATIVE
    assert sniff((FIELD / "srt-slurm/qwen35-397b-gb200-4xdep2-1xdep8.yaml").read_text()) == SRT_SLURM
    assert sniff((FIELD / "dynamo/qwen35-397b-fp8-h100-disagg.yaml").read_text()) == DYNAMO
    assert sniff(PAIR) == VLLM_SERVE
    # a native recipe whose serve_command mentions vllm serve stays native
    assert sniff("version: 1\nengine:\n  serve_command: [vllm, serve]\n") == NATIVE


def test_shell_words_keep_lines_through_continuations():
    commands = shell_words(PAIR)
    serve = [c for c in commands if any(w.text == "serve" for w in c)]
    assert len(serve) == 2
    words = {w.text: (w.line, w.col) for w in serve[0]}
    assert words["--port"] == (6, 3)
    assert words['{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'] == (7, 24)


def test_command_lines_map_to_fields_and_extra_args():
    result = load_text(PAIR, "pair.sh")
    assert result.ok, result.diagnostics
    loaded = result.recipes[0]
    r = loaded.recipe
    assert (r.cluster.gpu.value, r.engine.vllm_version, r.model.path) == ("H200", "0.26.0", "Qwen/Qwen3.5-35B-A3B")
    assert r.prefill.port == 8100 and r.prefill.enable_prefix_caching is False
    assert r.decode.max_num_seqs == 64 and r.decode.extra_args == ["--some-new-flag", "3"]
    assert r.decode.kv_role == "kv_consumer" and r.prefill.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    assert loaded.source.locate(("decode", "extra_args", 1)) == (9, 37)
    assert loaded.source.locate(("decode", "max_num_seqs")) == (9, 3)


def _recipectl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipectl", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_one_role_without_its_partner_is_invalid(tmp_path):
    script = tmp_path / "lonely.sh"
    script.write_text(PAIR.split("CUDA_VISIBLE_DEVICES=1")[0])
    r = _recipectl("validate", str(script))
    assert r.returncode == 2
    assert "a P/D recipe needs decode too" in r.stdout


def test_import_unknown_format_exits_2(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("nothing to see\n")
    r = _recipectl("import", str(other))
    assert r.returncode == 2 and "not a format recipectl imports" in r.stderr


def test_import_prints_what_it_could_not_carry():
    r = _recipectl("import", "tests/field/dynamo/qwen35-27b-h100-disagg-tp1-async-off.yaml")
    assert r.returncode == 0
    assert "not carried: service Frontend" in r.stderr
    assert "# Not carried over:" in r.stdout
    assert "--no-async-scheduling" in r.stdout


# ---------------------------------------------------------------- command substitutions
KV = '--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_%s"}\''


def test_a_command_substitution_is_one_word_as_written():
    (cmd,) = shell_words('vllm serve $(cat "model list.txt") --port "$(cat p) x" `echo  a` --x=$(f $(g h) $HOME)')
    assert [w.text for w in cmd] == [
        "vllm",
        "serve",
        '$(cat "model list.txt")',
        "--port",
        "$(cat p) x",
        "`echo  a`",
        "--x=$(f $(g h) $HOME)",
    ]
    assert [w.substitutions for w in cmd][2:] == [
        ('$(cat "model list.txt")',),
        (),
        ("$(cat p)",),
        ("`echo  a`",),
        ("$(f $(g h) $HOME)",),
    ]
    (cmd,) = shell_words("a '$(x y)' $(K8S_VAR)")  # quoted text; in a script, $(NAME) runs NAME
    assert [(w.text, w.substitutions) for w in cmd] == [("a", ()), ("$(x y)", ()), ("$(K8S_VAR)", ("$(K8S_VAR)",))]
    (cmd,) = shell_words("a $(K8S_VAR)", k8s_references=True)  # a container's args: Kubernetes' $(VAR)
    assert [(w.text, w.substitutions) for w in cmd] == [("a", ()), ("$(K8S_VAR)", ())]


def test_a_value_from_a_command_substitution_is_not_imported(recipectl_in_process, tmp_path):
    """`--max-model-len $(cat len.txt)` had been cut at its space: `$(cat` imported as the value,
    `len.txt)` left over; a variable assigned one carried its text as a value."""
    script = tmp_path / "pd.sh"
    script.write_text(
        "export HOST_IP=$(hostname -i)\n"
        "SEQS=$(cat seqs.txt)\n"
        "vllm serve Qwen/Qwen3.5-27B --port 8100 --max-model-len $(cat len.txt) --max-num-seqs $SEQS "
        f"{KV % 'producer'}\n"
        "vllm serve Qwen/Qwen3.5-27B --port 8200 --served-model-name `cat name.txt` --new-flag $(echo a b) "
        f"{KV % 'consumer'}\n"
    )
    code, out, err = recipectl_in_process("import", str(script))
    assert code == 0, err
    recipe = out.split("# Not carried over:")[0]
    assert "cat" not in recipe and "HOST_IP" not in recipe and "max_model_len" not in recipe, recipe
    assert "- $SEQS  #" in recipe  # known when the script runs: kept as written, for IMP001
    assert "positional argument" not in err  # `len.txt)`, the rest of the cut word
    why = "is a command substitution: recipectl does not run it, so the value is not imported"
    assert f"pd.sh:1: not carried: HOST_IP=$(hostname -i): `$(hostname -i)` {why}" in err
    assert f"pd.sh:3: not carried: --max-model-len: `$(cat len.txt)` {why}" in err
    assert f"pd.sh:4: not carried: --served-model-name: `cat name.txt` {why}" in err
    assert f"pd.sh:4: not carried: --new-flag: `$(echo a b)` {why}" in err and "--new-flag" not in recipe
    assert err.count("HOST_IP=") == 1  # an export both roles get, said once


def test_a_model_from_a_command_substitution_is_refused(recipectl_in_process, tmp_path):
    script = tmp_path / "pd.sh"
    script.write_text(
        f"vllm serve $(cat model.txt) --port 8100 {KV % 'producer'}\n"
        f'vllm serve --model "$(cat model.txt)" --port 8200 {KV % "consumer"}\n'
    )
    for command in ("import", "validate"):
        code, out, err = recipectl_in_process(command, str(script))
        assert code == 2, (command, out, err)
        assert "pd.sh:1:12" in out + err and "the model is `$(cat model.txt)`, a command substitution" in out + err


def test_a_dynamo_script_whose_model_is_a_command_substitution_is_refused(recipectl_in_process, tmp_path):
    text = (FIELD / "dynamo" / "qwen35-397b-fp8-h100-disagg.yaml").read_text()
    path = tmp_path / "graph.yaml"
    path.write_text(text.replace("--model Qwen/Qwen3.5-397B-A17B-FP8 ", "--model $(cat /models/name) "))
    code, _, err = recipectl_in_process("import", str(path))
    assert code == 2 and "graph.yaml:37:25: the model is `$(cat /models/name)`, a command substitution" in err, err


def test_a_script_with_windows_line_endings_reads_as_with_unix_ones(recipectl_in_process, tmp_path):
    """`\\` then CRLF had ended the command: each server read without its continued flags, and
    the script refused for having no --kv-transfer-config."""
    unix, windows = load_text(PAIR, "pair.sh"), load_text(PAIR.replace("\n", "\r\n"), "pair.sh")
    assert windows.ok, windows.diagnostics
    assert windows.recipes[0].recipe == unix.recipes[0].recipe
    assert windows.recipes[0].source.locate(("decode", "extra_args", 1)) == (9, 37)
    script = tmp_path / "pair.sh"
    script.write_bytes(PAIR.replace("\n", "\r\n").encode())
    code, out, err = recipectl_in_process("import", str(script))
    assert code == 0 and "kv_role: kv_consumer  # from " in out and "\r" not in out, err


def test_a_command_of_one_word_in_a_script_is_a_command_substitution(recipectl_in_process, tmp_path):
    """`$(pick_model)` and `$(whoami)` run commands in a script a user runs (only in a container's
    args does Kubernetes read `$(NAME)` as a variable): the model is refused as `$(pick_model x)`
    is, and a flag's value is not carried, where they had been imported as their text."""
    script = tmp_path / "pd.sh"
    script.write_text(
        f"vllm serve $(pick_model) --port 8100 {KV % 'producer'}\n"
        f"vllm serve $(pick_model) --port 8200 {KV % 'consumer'}\n"
    )
    code, out, err = recipectl_in_process("import", str(script))
    assert code == 2 and "pd.sh:1:12" in err and "the model is `$(pick_model)`, a command substitution" in err, err
    script.write_text(
        f"vllm serve Qwen/Qwen3.5-27B --port 8100 --tokenizer $(whoami) {KV % 'producer'}\n"
        f"vllm serve Qwen/Qwen3.5-27B --port 8200 {KV % 'consumer'}\n"
    )
    code, out, err = recipectl_in_process("import", str(script))
    assert code == 0, err
    assert "whoami" not in out.split("# Not carried over:")[0]
    assert "not carried: --tokenizer: `$(whoami)` is a command substitution" in err, err


def test_a_dynamo_script_reads_kubernetes_references_as_references(recipectl_in_process, tmp_path):
    """In a container's args Kubernetes replaces `$(NAME)` before bash runs: a reference there, not
    a command (as it is in a script a user runs)."""
    text = (FIELD / "dynamo" / "qwen35-397b-fp8-h100-disagg.yaml").read_text()
    path = tmp_path / "graph.yaml"
    path.write_text(text.replace("--model Qwen/Qwen3.5-397B-A17B-FP8 ", "--model $(MODEL_ID) "))
    code, out, err = recipectl_in_process("import", str(path))
    assert "command substitution" not in err, err
    assert "$(MODEL_ID)" in out.split("# Not carried over:")[0], out
