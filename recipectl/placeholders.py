"""Values that are set where a recipe is deployed, not in it: a shell parameter (`$X`, `${X}`,
`${X:-default}`), a Kubernetes dependent variable (`$(VAR)`) or an envsubst placeholder
(`${VLLM_IMAGE}`) that the reader could not resolve from the file itself.

One fact, one place: the readers (recipectl.formats) leave such a value as written, the flag
parser does not judge it as a value the engine would refuse, the schema takes it where a name
belongs (an image), and rule IMP001 reports it."""

from __future__ import annotations

import re

# `${...}` (any parameter expansion), `$(NAME)` (Kubernetes' form; a command substitution reads
# the same and is no more known), `$NAME`
REFERENCE = re.compile(r"\$\{[^}\s]*\}|\$\([A-Za-z_][A-Za-z0-9_]*\)|\$[A-Za-z_][A-Za-z0-9_]*")


def references(text: str) -> list[str]:
    """The unresolved references in `text`, as written."""
    return REFERENCE.findall(text) if "$" in text else []


def has_reference(text: object) -> bool:
    return isinstance(text, str) and "$" in text and REFERENCE.search(text) is not None


def with_stand_ins(text: str, stand_in: str = "x") -> str:
    """`text` with each reference replaced by `stand_in` (to check the shape around a placeholder:
    `registry/vllm:${TAG}` is an image reference whatever the tag turns out to be)."""
    return REFERENCE.sub(stand_in, text)
