"""Mask API keys, tokens and passwords before text or data leaves art (events, logs, errors).

`redact` masks known secret shapes in free text (`sk-...`, `Bearer ...`, `api_key=...`,
well-known provider key prefixes), every value stored under a secret-looking key
(`api_key`, `token`, `client_secret`, `password`, ...), and any extra secret values
the caller names (typically those found in `llm_params` by `secrets_from_params`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["MASK", "is_secret_key", "redact", "secrets_from_params"]

MASK = "***"

T = TypeVar("T")

# A dict key whose value is a secret, once normalized to snake_case: api_key, apiKey,
# x-api-key, access_token, client_secret, password, authorization, ...
_SECRET_KEY = re.compile(
    r"^key$|(?:^|_)(?:api_?key|access_key|secret_key|private_key|auth_key|token|secret|password"
    r"|passwd|authorization|credentials?|auth)$|secret|password"
)
# Keys that end like a secret but hold none.
_NOT_SECRET_KEYS = frozenset({"max_tokens", "max_completion_tokens", "max_output_tokens"})
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# (pattern, replacement, words): a pattern runs only on a text that holds one of its
# words once case-folded, as each of its matches does. Scanning costs: the first pattern
# tries a match at every word character (~0.3 ms per 1,000 characters of JSON).
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    # `api_key=...`, `"api_key": "..."`, `password: ...`, `x-api-key: ...`
    (
        re.compile(
            r"""(?P<key>["']?[\w\-]*(?:api[_\-]?key|secret|password|passwd|token)["']?\s*[=:]\s*)"""
            r"""(?P<quote>["']?)(?P<value>[^\s"',;&}]{4,})""",
            re.IGNORECASE,
        ),
        r"\g<key>\g<quote>" + MASK,
        ("key", "secret", "passw", "token"),
    ),
    # Authorization headers and bearer tokens.
    (
        re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+[A-Za-z0-9._~+/\-]{8,}=*", re.IGNORECASE),
        r"\g<scheme> " + MASK,
        ("bearer", "basic", "token"),
    ),
    # OpenAI / Anthropic / OpenRouter style keys: sk-..., sk-proj-..., sk-ant-...
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "sk-" + MASK, ("sk-",)),
    # Other well-known shapes: Google, AWS, GitHub, Slack, Hugging Face, Groq, xAI.
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), MASK, ("aiza",)),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK, ("akia", "asia")),
    (
        re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),
        MASK,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), MASK, ("xox",)),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), MASK, ("hf_",)),
    (re.compile(r"\b(?:gsk|xai)-?_?[A-Za-z0-9]{20,}"), MASK, ("gsk", "xai")),
)

# Secret values shorter than this are not masked inside free text (it would mask words).
_MIN_SECRET_LENGTH = 6


def is_secret_key(key: Any) -> bool:
    """True for a mapping key whose value should never be shown (api_key, token, password...)."""
    if not isinstance(key, str):
        return False
    normalized = _CAMEL_BOUNDARY.sub("_", key).lower().replace("-", "_").replace(" ", "_")
    return normalized not in _NOT_SECRET_KEYS and bool(_SECRET_KEY.search(normalized))


def secrets_from_params(params: Mapping[str, Any] | None) -> frozenset[str]:
    """The string values of `params` stored under secret-looking keys (nested included)."""
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, secret or is_secret_key(key))
        elif isinstance(value, list | tuple | set | frozenset):
            for item in value:
                walk(item, secret)
        elif secret and isinstance(value, str) and len(value) >= _MIN_SECRET_LENGTH:
            found.add(value)

    walk(params or {}, False)
    return frozenset(found)


def _redact_text(text: str, secrets: Iterable[str]) -> str:
    # Longest first, so a secret containing another is masked whole.
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LENGTH and secret in text:
            text = text.replace(secret, MASK)
    if "sk-" in text or "=" in text or ":" in text or " " in text:
        lowered = text.casefold()
        for pattern, replacement, words in _TEXT_PATTERNS:
            if not any(word in lowered for word in words):
                continue
            masked = pattern.sub(replacement, text)
            if masked != text:
                text, lowered = masked, masked.casefold()
    return text


def redact(value: T, secrets: Iterable[str] = ()) -> T:
    """`value` with secrets masked: strings rewritten, containers copied and walked.

    Values under secret-looking keys are replaced by `***` whole; other values keep
    their type (numbers, None, ...). `secrets` adds exact values to mask everywhere.
    """
    secret_list = tuple(s for s in secrets if isinstance(s, str))
    return _redact(value, secret_list, 0)


def _redact(value: Any, secrets: tuple[str, ...], depth: int) -> Any:
    if isinstance(value, str):
        return _redact_text(value, secrets)
    if depth > 50:  # pathological nesting: do not recurse further, but never leak
        return MASK
    if isinstance(value, Mapping):
        return {
            key: (
                MASK
                if is_secret_key(key) and item is not None and not isinstance(item, bool)
                else _redact(item, secrets, depth + 1)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, secrets, depth + 1) for item in value]
    if isinstance(value, tuple):
        return tuple(_redact(item, secrets, depth + 1) for item in value)
    if isinstance(value, BaseException):
        return _redact_text(str(value), secrets)
    return value
