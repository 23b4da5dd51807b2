"""The value types a recipe's fields are made of, below the schema: text without control
characters (and Strict, the base of every section, which refuses them), environment variable
names, hosts (RFC 1123 names, IP addresses, loopback), OCI image references, PEP 440 versions and
token counts. Each raises SchemaValueError (a ValueError with a fix) or answers yes or no; the
schema's models attach them to fields."""

# No `from __future__ import annotations`: TokenCount is read by pydantic at class creation.

import ipaddress
import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

# Upper bounds of numbers no real deployment comes near: a typo such as 10**400 (or .inf) is a
# schema error, never arithmetic that overflows, a loop over it, or a wait that never ends.
MAX_TOKENS = 1 << 30  # token counts
MAX_SECONDS = 7 * 24 * 3600  # timeouts: a week


# Characters no recipe value may hold: C0/C1 controls (newline, NUL, escape, ...), the Unicode line
# and paragraph separators (YAML 1.1 breaks lines at U+0085, U+2028, U+2029), lone surrogates (they
# cannot be written out) and the bidirectional overrides that make text read other than it runs.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def control_char(value: Any) -> str | None:
    """The first forbidden character in a value (strings, and the keys and items of containers)."""
    if isinstance(value, str):
        m = _CONTROL.search(value)
        return m.group() if m else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = control_char(k) or control_char(v)
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for v in value:
            found = control_char(v)
            if found:
                return found
    return None


def escape_controls(text: str) -> str:
    """`text` to show on a terminal: each character control_char forbids as its escape (an escape
    character as \\x1b), so that a name from a file or /proc cannot move the cursor, retitle the
    window or hide what follows it."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


class SchemaValueError(ValueError):
    """A ValueError that carries a fix for the diagnostic."""

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.fix = fix


_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
# PEP 440 (its appendix's pattern, as a full match: "0.26.0; rm -rf ~" is not a version)
_PEP440 = re.compile(
    r"v?(?:\d+!)?\d+(?:\.\d+)*"
    r"(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?\d*)?"
    r"(?:-\d+|[-_.]?(?:post|rev|r)[-_.]?\d*)?"
    r"(?:[-_.]?dev[-_.]?\d*)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?",
    re.I,
)
# An OCI image reference (the distribution/reference grammar): [registry[:port]/]path[:tag][@digest]
_OCI_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_OCI_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_OCI_DOMAIN = rf"(?:{_OCI_LABEL}(?:\.{_OCI_LABEL})*|\[[0-9a-fA-F:.]+\])(?::\d+)?"
_OCI_REF = re.compile(
    rf"(?:{_OCI_DOMAIN}/)?{_OCI_COMPONENT}(?:/{_OCI_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(env: dict[str, str]) -> dict[str, str]:
    """Environment variable names are identifiers: a name is written into scripts as `NAME=value`."""
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise SchemaValueError(
                f"{name!r} is not an environment variable name",
                fix="use letters, digits and '_', not starting with a digit, e.g. MY_VAR",
            )
    return env


# What a field that names a file, a directory or a program may hold. Such a value is the first word
# of a command or an operand of one (`env -- VENV/bin/vllm`, `vllm serve MODEL`, `srun ... env -- PROG`):
# a leading '-' would be read as an option of the program before it (GNU env's `-S` runs a string),
# an '=' before the program makes env read it as an assignment and run the next word instead, and
# lengths past the kernel's (PATH_MAX 4096, NAME_MAX 255 bytes a component) end in an OSError.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255


def check_path(value: str, *, program: bool = False) -> str:
    """`value` as a path the rendered commands may hold as a word: not empty, no leading '-', no
    control character, within the kernel's lengths; a program (a command's first word, a venv whose
    bin/ holds the programs) has no '=' either."""
    if not value:
        raise SchemaValueError("an empty path", fix="name a file or directory, or remove the key")
    found = control_char(value)
    if found is not None:
        raise SchemaValueError(
            f"the path holds the control character {found!r}",
            fix="write the path on one line, without control characters",
        )
    if value.startswith("-"):
        raise SchemaValueError(
            "a path that starts with '-' would be read as an option of the command it is passed to",
            fix="write it as an absolute path, or relative with ./ in front",
        )
    if program and "=" in value:
        raise SchemaValueError(
            "a program path with '=' would be read by env as a variable assignment, and the next word run instead",
            fix="move the program to a path without '='",
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise SchemaValueError(
            f"a path of {size:,} bytes (the limit is {MAX_PATH_BYTES})",
            fix="use a shorter path (a symlink to the directory, for example)",
        )
    longest = max(len(part.encode("utf-8", "surrogatepass")) for part in value.split("/"))
    if longest > MAX_NAME_BYTES:
        raise SchemaValueError(
            f"a path component of {longest:,} bytes (the limit is {MAX_NAME_BYTES})",
            fix="use shorter file and directory names",
        )
    return value


def check_program(command: list[str] | None) -> list[str] | None:
    """A command (`serve_command`, `router_command`, `proxy_command`): a program, then its arguments."""
    if command is None:
        return None
    if not command:
        raise SchemaValueError("an empty command", fix="name the program first, then its arguments")
    check_path(command[0], program=True)
    return command


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version's leading numbers; None for no version."""
    if not text:
        return None
    m = _VERSION_RE.match(text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


# vLLM's own release images, on Docker Hub (optionally with its registry name); the tag is the release.
_VLLM_RELEASE_IMAGE = re.compile(
    r"(?:(?:docker\.io|registry-1\.docker\.io)/)?vllm/vllm-openai:v?(\d+\.\d+\.\d+)(?:-[A-Za-z0-9.]+)?"
)


def is_version(text: str) -> bool:
    """A PEP 440 version, as a full match ("0.26.0; rm -rf ~" is not one), with numbers to compare."""
    return bool(_PEP440.fullmatch(text)) and parse_version(text) is not None


def is_image_reference(text: str) -> bool:
    """An OCI image reference: [registry[:port]/]path[:tag][@digest]."""
    return len(text) <= 512 and bool(_OCI_REF.fullmatch(text))


def release_image_version(image: str) -> tuple[int, int, int] | None:
    """The vLLM version of one of vLLM's own release images (vllm/vllm-openai:vX.Y.Z); None for any
    other image."""
    m = _VLLM_RELEASE_IMAGE.fullmatch(image.split("@", 1)[0])
    return parse_version(m.group(1)) if m else None


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def is_host(text: str) -> bool:
    """An RFC 1123 host name or an IPv4/IPv6 address (no port, no scheme, no brackets)."""
    if ":" in text or (text and text.replace(".", "").isdigit()):
        try:
            ipaddress.ip_address(text)
        except ValueError:
            return False
        return True
    return 0 < len(text) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in text.split("."))


def is_loopback(host: str) -> bool:
    """A host that only this machine reaches: localhost, 127.0.0.0/8, ::1."""
    if host.lower() == "localhost":
        return True
    if ":" in host or host.replace(".", "").isdigit():
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return False


def parse_tokens(value: Any) -> Any:
    """vLLM accepts 16K / 1M style sizes for token counts; so do we."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)\s*", value)
        if not m:
            raise SchemaValueError(f"'{value}' is not a token count", fix="write a number like 16384 or 16K")
        n = int(m.group(1))
        unit = m.group(2).lower()
        return n * {"": 1, "k": 1024, "m": 1024 * 1024}[unit]
    return value


def _whole(v: Any) -> Any:
    if isinstance(v, bool):
        raise PydanticCustomError("int_type", "Input should be a whole number, not true or false")
    return v


def _number(v: Any) -> Any:
    if isinstance(v, bool):
        raise PydanticCustomError("float_type", "Input should be a number, not true or false")
    return v


# A number field of a recipe or a peer file. YAML's true and false are no numbers: pydantic's int
# and float would take them as 1 and 0 (`port: true` as port 1). Each field gives its bounds.
Whole = Annotated[int, BeforeValidator(_whole)]
Number = Annotated[float, BeforeValidator(_number)]
TokenCount = Annotated[Whole, Field(ge=1, le=MAX_TOKENS)]


# Linux's limits on a path (PATH_MAX, NAME_MAX): a longer one cannot be opened, and once made
# `stat` fail with "File name too long" deep in the planner.
PATH_MAX = 4096
NAME_MAX = 255


def check_path_length(value: str) -> str:
    """A path the system can open: at most PATH_MAX bytes, each name at most NAME_MAX."""
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > PATH_MAX - 1:
        raise SchemaValueError(
            f"a path of {size:,} bytes: the system takes at most {PATH_MAX - 1:,}",
            fix="point at the directory by a shorter path (a symlink, or a relative path)",
        )
    longest = max(value.split("/"), key=len)
    if len(longest.encode("utf-8", "surrogatepass")) > NAME_MAX:
        raise SchemaValueError(
            f"a name of {len(longest.encode('utf-8', 'surrogatepass')):,} bytes in the path: "
            f"the system takes at most {NAME_MAX} per name",
            fix="rename it, or check the path",
        )
    return value


PathText = Annotated[str, AfterValidator(check_path_length)]


# CPU ids a core list may name: Linux numbers its CPUs below NR_CPUS (at most 8,192 on x86-64),
# and a role's lists together name at most MAX_ROLE_CORES of them. `['0-100000000']` (14 bytes)
# once took 1.2 GB to expand.
MAX_CPU_ID = 65535
MAX_ROLE_CORES = 1 << 20
MAX_CORE_LIST_CHARS = 1024
_CORE_NUMBER = re.compile(r"\d+")


def core_ranges(spec: str) -> list[tuple[int, int]]:
    """'0-3,6' -> [(0, 3), (6, 6)]: the inclusive ranges of a core list, overlaps merged; raises
    ValueError for anything else (a reversed range, a word, an id past MAX_CPU_ID)."""
    ranges: list[tuple[int, int]] = []
    for part in spec.split(","):
        a, dash, b = part.strip().partition("-")
        if not (a.strip().isdigit() and (not dash or b.strip().isdigit())):
            raise ValueError(spec)
        lo, hi = int(a), int(b) if dash else int(a)
        if hi < lo or hi > MAX_CPU_ID:
            raise ValueError(spec)
        ranges.append((lo, hi))
    return _merged(ranges)


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges sorted, the overlapping and the adjacent joined."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def core_list_text(cores: Iterable[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5': cores as the shortest core list (what taskset -c and
    VLLM_CPU_OMP_THREADS_BIND read)."""
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in _merged((c, c) for c in cores))


def check_core_lists(lists: list[str] | None) -> list[str] | None:
    """cpu_cores within bounds: each list short, every number a CPU id (< 65,536), and the lists
    of a role naming at most MAX_ROLE_CORES CPUs in all. What is not a core list at all ("auto")
    is left to rule CPU001."""
    if lists is None:
        return lists
    total = 0
    for entry in lists:
        if len(entry) > MAX_CORE_LIST_CHARS:
            raise SchemaValueError(
                f"a core list of {len(entry):,} characters (at most {MAX_CORE_LIST_CHARS:,})",
                fix="write ranges, e.g. '0-63'",
            )
        big = next((n for n in _CORE_NUMBER.findall(entry) if len(n) > 5 or int(n) > MAX_CPU_ID), None)
        if big is not None:
            shown = big if len(big) <= 12 else big[:12] + "..."
            raise SchemaValueError(
                f"CPU {shown} in {entry[:40]!r}: CPU ids are below {MAX_CPU_ID + 1:,}",
                fix="name the host's CPUs (`lscpu` lists them), e.g. '0-3'",
            )
        try:
            total += sum(hi - lo + 1 for lo, hi in core_ranges(entry))
        except ValueError:
            continue
        if total > MAX_ROLE_CORES:
            raise SchemaValueError(
                f"the core lists name more than {MAX_ROLE_CORES:,} CPUs",
                fix="give each endpoint the cores of its host, e.g. '0-63'",
            )
    return lists


class Strict(BaseModel):
    # defer_build: a model's validator is built when first used, not when its class is defined.
    # Loading a recipe needs only Recipe's (it holds every section), so the sections' own
    # validators and the unused RoleSection's are never built on `recipectl validate`.
    # (Empty-list defaults are `lambda: []` rather than `list` for start-up time as well: pydantic
    # reads every default factory's signature, and the text signature of a builtin is parsed with
    # tokenize, whose large regex would be compiled for it.)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    @field_validator("*")
    @classmethod
    def _no_control_characters(cls, v: Any) -> Any:
        """A recipe is data: no value may hold a newline, NUL or other control character (a newline
        in a model path would end the comment it is quoted in and start a command or a YAML document).
        After validation, so that a section's own fields report their own path (a section is a model
        instance by then, checked by its own validator)."""
        found = control_char(v)
        if found is not None:
            raise SchemaValueError(
                f"the value holds the control character {found!r}",
                fix="write it on one line, without control characters",
            )
        return v
