"""What a hostile or careless original cannot make `recipectl import` write: no credential of the
original reaches the written recipe, its comments or the not-carried lines on stderr, in any of
the formats import reads. A credential in an environment variable or a credential flag is
written as a reference (`${HF_TOKEN}`, `--api-key ${VLLM_API_KEY}`); any other one is not carried,
and a flag whose value goes goes with it.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import yaml

from recipectl.commands.fix import fix
from recipectl.commands.import_ import import_recipe, to_yaml
from recipectl.errors import RecipectlError
from recipectl.formats.common import Imported
from recipectl.yamlsource import FAST_LOADER

ROOT = Path(__file__).resolve().parent.parent
FIELD = ROOT / "tests" / "field"
LOADER = FAST_LOADER or yaml.SafeLoader  # the recipe loader's parser

SECRETS = [
    "hf_SECRETSECRETSECRETSECRET01",
    "hunter2hunter2",
    "pa55word",
    "s3cr3tAPIKEY",
    "hf_SECRETSECRETSECRET02x",
    "PWsecretJSON",
    "QUERYTOKEN123",
    "tok_abcdefSECRET9",
    "pw0rdXYZ",
]

PAIR = """#!/bin/bash
export VLLM_SSM_CONV_STATE_LAYOUT=DS
export HF_TOKEN=hf_SECRETSECRETSECRETSECRET01
export MY_PASSWORD=hunter2hunter2
export DB_URL=postgres://bob:pa55word@db.example/x
CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3.5-35B-A3B --port 8100 --no-enable-prefix-caching \\
  --api-key s3cr3tAPIKEY --hf-token=hf_SECRETSECRETSECRET02x --max-num-seqs 8 \\
  --model-loader-extra-config '{"password":"PWsecretJSON"}' --download-dir https://u:pw0rdXYZ@h/x \\
  --some-url 'http://x/?token=QUERYTOKEN123' --some-new-flag kept \\
  --kv-transfer-config 'KV' &
CUDA_VISIBLE_DEVICES=1 vllm serve Qwen/Qwen3.5-35B-A3B --port 8200 --no-enable-prefix-caching \\
  --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}' &
wait
""".replace(
    "KV",
    '{"kv_connector":"NixlConnector","kv_role":"kv_producer",'
    '"kv_connector_extra_config":{"token":"tok_abcdefSECRET9"}}',
)


def _import(tmp_path: Path, name: str, text: str, capsys) -> tuple[dict, str]:
    src = tmp_path / name
    src.write_text(text)
    out = tmp_path / "recipe.yaml"
    assert import_recipe(str(src), out=str(out)) == 0
    written = out.read_text()
    said = capsys.readouterr()
    for secret in SECRETS:
        assert secret not in written, written
        assert secret not in said.err + said.out
    _import.written = written
    return yaml.safe_load(written), said.err


def test_vllm_serve_credentials_become_references_or_are_not_carried(tmp_path, capsys):
    recipe, err = _import(tmp_path, "pd.sh", PAIR, capsys)
    env = recipe["prefill"]["env"]
    assert env["HF_TOKEN"] == "${HF_TOKEN}" and env["MY_PASSWORD"] == "${MY_PASSWORD}"
    assert env["DB_URL"] == "${DB_URL}" and env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    args = recipe["prefill"]["extra_args"]
    assert args[args.index("--api-key") + 1] == "${VLLM_API_KEY}"
    assert "--hf-token=${HF_TOKEN}" in args
    # a value that is not carried takes its flag with it; the other flags stay, each with its value
    for gone in ("--model-loader-extra-config", "--download-dir", "--some-url"):
        assert gone in err and gone not in args
    assert args[args.index("--some-new-flag") + 1] == "kept"
    # and the items after those that went keep their own `# from` comments
    assert re.search(r"- --some-new-flag  # from \S*pd\.sh:9 --some-new-flag\n", _import.written)
    assert re.search(r"- kept  # from \S*pd\.sh:9 kept\n", _import.written)
    assert "token" not in recipe["kv_transfer"].get("extra_config", {})


def test_dynamo_env_and_args_credentials(tmp_path, capsys):
    text = (FIELD / "dynamo" / "qwen35-27b-h100-disagg-tp1-async-off.yaml").read_text()
    text = text.replace(
        """            - name: VLLM_SSM_CONV_STATE_LAYOUT
              value: DS
""",
        """            - name: VLLM_SSM_CONV_STATE_LAYOUT
              value: DS
            - name: HF_TOKEN
              value: hf_SECRETSECRETSECRETSECRET01
            - name: STORE
              value: "https://al:pa55word@h/x"
""",
        1,
    ).replace(
        "            - --no-async-scheduling\n",
        "            - --no-async-scheduling\n            - --api-key\n            - s3cr3tAPIKEY\n",
        1,
    )
    recipe, _ = _import(tmp_path, "dgd.yaml", text, capsys)
    assert recipe["prefill"]["env"]["HF_TOKEN"] == "${HF_TOKEN}"
    assert recipe["prefill"]["env"]["STORE"] == "${STORE}"


def test_srt_slurm_environment_credentials(tmp_path, capsys):
    text = (FIELD / "srt-slurm" / "qwen35-397b-gb200-4xdep2-1xdep8.yaml").read_text()
    assert "  prefill_environment:\n" in text
    text = text.replace(
        "  prefill_environment:\n",
        "  prefill_environment:\n    HF_TOKEN: hf_SECRETSECRETSECRETSECRET01\n"
        "    AWS_SECRET_ACCESS_KEY: hunter2hunter2\n",
        1,
    )
    recipe, _ = _import(tmp_path, "srt.yaml", text, capsys)
    assert recipe["prefill"]["env"]["AWS_SECRET_ACCESS_KEY"] == "${AWS_SECRET_ACCESS_KEY}"


# keys and values that begin with a YAML indicator: written plain inside a flow collection (a
# list item's mapping, kv_transfer.extra_config), `? a` read back as the key `a` and `: *a` as no
# recipe at all
INDICATOR_TEXTS = [
    ": *a",
    "? a",
    "?",
    ":",
    ": x: y",
    "? [a]",
    "-",
    "- a",
    "-a",
    ":a",
    "?a",
    "! a",
    "%a",
    "@a",
    "`a",
    "&a b",
    "*a",
    "|",
    ">",
    "#",
    "[a",
    "{a",
    ",a",
    "]",
    "}",
]


@pytest.mark.parametrize("text", INDICATOR_TEXTS)
def test_text_starting_with_an_indicator_survives_in_flow_and_block(text):
    data = {
        "version": [{text: None, "k": text}],
        "kv_transfer": {"extra_config": {text: text}},
        "prefill": {text: text, "extra_args": [text, "--x", text]},
    }
    written = to_yaml(Imported(format="vllm-serve", file="f.sh", data=data))
    assert yaml.load(written, Loader=LOADER) == data, written


def _pair(tmp_path: Path) -> Path:
    prefill = tmp_path / "x-prefill.sh"
    prefill.write_text((FIELD / "vllm-serve" / "qwen35-27b-gb200-tp1-prefill.sh").read_text())
    (tmp_path / "x-decode.sh").write_text((FIELD / "vllm-serve" / "qwen35-27b-gb200-tp1-decode.sh").read_text())
    return prefill


def _special_files(tmp_path: Path) -> list[Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    made = [fifo]
    try:  # a device node, as /dev/null is: root only
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        made.append(tmp_path / "null")
    except PermissionError:
        pass
    return made


def test_import_o_never_replaces_a_fifo_or_device_even_with_force(tmp_path, capsys):
    """`-o /dev/null --force` once replaced the device with a regular file holding the recipe."""
    src = _pair(tmp_path)
    for special in _special_files(tmp_path):
        kind = stat.S_IFMT(os.lstat(special).st_mode)
        with pytest.raises(RecipectlError, match="not a regular file"):
            import_recipe(str(src), out=str(special), force=True)
        assert stat.S_IFMT(os.lstat(special).st_mode) == kind
    with pytest.raises(RecipectlError, match="-o is empty"):
        import_recipe(str(src), out="", force=True)


def _fixable(tmp_path: Path, capsys) -> Path:
    """An imported recipe with a safe fix to make (the SD conv-state layout to DS)."""
    out = tmp_path / "recipe.yaml"
    assert import_recipe(str(FIELD / "vllm-serve" / "known-bad-sd-conv-layout.sh"), out=str(out)) == 0
    capsys.readouterr()
    return out


def test_fix_on_yaml_only_the_loader_reads_is_a_clean_refusal(tmp_path, capsys):
    """A tab in the trailing blanks of a line: the recipe loader reads it, ruamel.yaml's scanner
    does not, and guessing the file's indentation was outside the guard (an internal error)."""
    recipe = _fixable(tmp_path, capsys)
    text = recipe.read_text().replace("version: 1\n", "version: 1 \t \n", 1)
    recipe.write_text(text)
    assert fix([str(recipe)]) in (0, 1)
    assert "a fix was not applied" in capsys.readouterr().out
    assert recipe.read_text() == text


def test_fix_leaves_a_file_the_user_may_not_write(tmp_path, capsys, monkeypatch):
    """The atomic rename needs only the directory's permission: a read-only recipe (for a user
    who is not root: os.access says so) would be replaced, where writing in place was refused."""
    recipe = _fixable(tmp_path, capsys)
    before = recipe.read_bytes()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: False if Path(p) == recipe and m == os.W_OK else real_access(p, m, **k)
    )
    with pytest.raises(RecipectlError, match="read-only; the file is unchanged"):
        fix([str(recipe)])
    assert recipe.read_bytes() == before
