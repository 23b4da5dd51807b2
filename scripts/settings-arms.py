"""Write the two arms of one setting's A/B: the seed's value ("seed") and vLLM's default ("default"),
each a copy of RECIPE with only that setting changed (and the workload, when asked to scale it).

    python3 scripts/settings-arms.py RECIPE SETTING OUT_DIR [--isl N --osl N --concurrency 1,8,32 --prompts N]

Settings (issue: the seed's settings, one at a time):
    prefill-mnbt      prefill max_num_batched_tokens 2 x ISL      | not set (vLLM's default)
    stream-interval   decode stream_interval 100                  | 1 (vLLM's default)
    async-scheduling  async_scheduling on, both roles             | off, both roles
    ssm-dtype         mamba_ssm_cache_dtype bfloat16, both roles  | float32, both roles

Prints the two recipe paths. The copies lose the recipe's comments: they are run inputs, kept
beside their results so that each number can be traced to the recipe that produced it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROLES = ("prefill", "decode")


def _set(recipe: dict, role: str, key: str, value) -> None:
    section = recipe.setdefault(role, {})
    if value is None:
        section.pop(key, None)
    else:
        section[key] = value


def arms(recipe: dict, setting: str) -> dict[str, dict]:
    isl = recipe["workload"]["isl"]
    out = {}
    for arm in ("seed", "default"):
        r = yaml.safe_load(yaml.safe_dump(recipe))  # a deep copy
        seed = arm == "seed"
        if setting == "prefill-mnbt":
            _set(r, "prefill", "max_num_batched_tokens", 2 * isl if seed else None)
        elif setting == "stream-interval":
            _set(r, "decode", "stream_interval", 100 if seed else 1)
        elif setting == "async-scheduling":
            for role in ROLES:
                _set(r, role, "async_scheduling", seed)
        elif setting == "ssm-dtype":
            for role in ROLES:
                _set(r, role, "mamba_ssm_cache_dtype", "bfloat16" if seed else "float32")
        else:
            raise SystemExit(f"unknown setting {setting!r}: prefill-mnbt, stream-interval, async-scheduling, ssm-dtype")
        r["name"] = f"{recipe['name']}-{setting}-{arm}"
        out[arm] = r
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe", type=Path)
    p.add_argument("setting")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--isl", type=int)
    p.add_argument("--osl", type=int)
    p.add_argument("--concurrency", help="comma-separated levels")
    p.add_argument("--prompts", type=int, help="prompts_per_concurrency")
    a = p.parse_args(argv)
    recipe = yaml.safe_load(a.recipe.read_text())
    w = recipe["workload"]
    if a.isl:
        w["isl"] = a.isl
    if a.osl:
        w["osl"] = a.osl
    if a.concurrency:
        w["concurrency"] = [int(c) for c in a.concurrency.split(",")]
    if a.prompts:
        w["prompts_per_concurrency"] = a.prompts
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for arm, r in arms(recipe, a.setting).items():
        path = a.out_dir / f"{a.setting}-{arm}.yaml"
        path.write_text(yaml.safe_dump(r, sort_keys=False))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
