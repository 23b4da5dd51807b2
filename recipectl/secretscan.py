"""What looks like a credential: by name (HF_TOKEN, DB_PASSWD, OPENAI_KEY, GITHUB_PAT), by value
(hf_..., sk-..., ghp_..., github_pat_..., AKIA..., a URL with a password or a `?token=` parameter),
and as an argument (--api-key VALUE); and every output's redaction of them. Used by the operability
rules, by the loader (which never quotes such a value back), by the renderers (which refuse to write
one), by `show` and `plan`, by the error handler, and by the local launcher (which never writes one
into the run state)."""

from __future__ import annotations

import re
from typing import Any

# A name component that says "credential": HF_TOKEN, DB_PASSWD, OPENAI_KEY, GITHUB_PAT, AWS_SECRET_ACCESS_KEY
_SECRET_NAME = re.compile(r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|KEY|APIKEY|ACCESSKEY|PAT|CREDENTIALS?)(?:_|$)", re.I)
_NOT_SECRET_NAME = re.compile(r"_(?:PATH|FILE|DIR|HOST|PORT|URL|ID)$", re.I)

# Token formats with a recognisable prefix (and enough characters after it to be a real one).
# Hugging Face user access tokens are `hf_` and 34 letters; shorter ones appear in tests, examples
# and older tokens, so `hf_` and 8 or more letters and digits is a token when they are not all
# lower-case letters (`hf_checkpoints`, `hf_download` are directory names), and 20 or more always.
_SECRET_VALUE = re.compile(
    r"(?:\bhf_(?:[A-Za-z0-9]{20,}|(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{8,19}(?![A-Za-z0-9]))"  # Hugging Face
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained PAT
    r"|\bglpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)

# user:password@ in a URL: the userinfo is the secret, the scheme and host stay
_SECRET_USERINFO = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)")

# A credential in a URL's query (`?token=`, `&api_key=`, `access_token=`, a signed URL's `sig=`),
# or such a pair on its own (`access_token=...`): the parameter name stays, its value is the secret.
# A reference (`?token=${TOKEN}`) is none, nor what was redacted already.
_QUERY_NAME = (
    r"(?:(?:access|id|refresh|auth|session|x-amz-security)[_-]?)?token|(?:client[_-]?)?secret|"
    r"(?:api|access|secret|private)[_-]?key|apikey|password|passwd"
)
_SECRET_QUERY = re.compile(
    rf"(?P<name>(?:[?&;](?:{_QUERY_NAME}|key|pwd|sig|signature|x-amz-signature|x-amz-credential|auth)"
    rf"|(?<![A-Za-z0-9_])(?:{_QUERY_NAME}))=)"  # bare `key=`, `sig=` only inside a URL's query
    r"(?P<value>(?![$<])[^&#\s]+)",
    re.I,
)

# ${NAME}, $NAME; ${NAME:-default} is a reference only when the default is empty or another reference
_ENV_REF = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?-(.*))?\}|([A-Za-z_][A-Za-z0-9_]*))$", re.S)

# Flags whose value is a credential (vllm serve --api-key, vllm-router --api-key, hub tokens)
_SECRET_FLAG = re.compile(
    r"^--?(?:[a-z0-9-]*-)?(?:api-keys?|token|hf-token|password|passwd|secret|"
    r"access-key|secret-key|auth-token|credentials?)$",
    re.I,
)


def secret_name(name: str) -> bool:
    """`name` (an environment variable, a key) names a credential."""
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def secret_value(value: str) -> bool:
    """`value` holds something shaped like a credential (a known token format, URL credentials)."""
    return bool(_SECRET_VALUE.search(value) or _SECRET_USERINFO.search(value) or _SECRET_QUERY.search(value))


def env_reference(value: str) -> tuple[str, str | None] | None:
    """(name, default) when `value` is `${NAME}`, `$NAME` or `${NAME:-default}`; None for a literal."""
    m = _ENV_REF.match(value.strip())
    if not m:
        return None
    return (m.group(1) or m.group(3)), m.group(2)


def pure_reference(value: str) -> bool:
    """A reference whose default (if any) is empty or itself a reference: no literal inside.
    Defaults are followed in a loop, not by recursion: a value may nest thousands deep."""
    while True:
        ref = env_reference(value)
        if ref is None:
            return False
        if not ref[1]:
            return True
        value = ref[1]


def secret_flag(arg: str) -> str | None:
    """The flag when `arg` is a credential flag (`--api-key`, `--api-key=VALUE`); else None."""
    flag = arg.split("=", 1)[0]
    return flag if _SECRET_FLAG.match(flag) else None


def redact_text(text: str) -> str:
    """`text` with every credential-shaped run replaced by <redacted> (a URL parameter keeps its name)."""
    text = _SECRET_USERINFO.sub("<redacted>", _SECRET_VALUE.sub("<redacted>", text))
    return _SECRET_QUERY.sub(r"\g<name><redacted>", text)


def redact_argv(argv: list[str]) -> list[str]:
    """argv for the run state and messages: the value of a credential flag and anything
    credential-shaped replaced by <redacted>; references stay (they hold no secret)."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(a if pure_reference(a) else "<redacted>")
            hide_next = False
            continue
        flag = secret_flag(a)
        if flag and "=" in a:
            value = a.split("=", 1)[1]
            out.append(a if pure_reference(value) else f"{flag}=<redacted>")
            continue
        hide_next = flag is not None
        out.append(redact_text(a))
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """An environment for the run state: credential-named or credential-shaped literals hidden."""
    return {
        k: v if pure_reference(v) or not (secret_name(k) or secret_value(v)) else "<redacted>" for k, v in env.items()
    }


def redact_data(value: Any, key: str | None = None, *, hide: bool = False) -> Any:
    """A recipe's data (or any JSON-like data) as an output may show it: a literal under a
    credential-named key (`HF_TOKEN: hf_...`, `password: ...`) is <redacted>, argument lists are
    redacted as argv (`--api-key VALUE`), credential-shaped runs anywhere are <redacted>; keys are
    redacted as text. References stay: they hold no secret."""
    if isinstance(value, dict):
        return {
            redact_text(k) if isinstance(k, str) else k: redact_data(
                v, k if isinstance(k, str) else None, hide=hide or (isinstance(k, str) and secret_name(k))
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            items = redact_argv(list(value))
            return ["<redacted>" if hide and not pure_reference(v) and v else v for v in items]
        return [redact_data(v, key, hide=hide) for v in value]
    if isinstance(value, str):
        if hide and value and not pure_reference(value):
            return "<redacted>"
        return redact_text(value)
    return value
