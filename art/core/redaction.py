"""Mask API keys, tokens and passwords before text or data leaves art (logs, events, storage).

Two kinds of masking:

- `redact` (errors, logs, provider replies): known secret shapes in free text (`sk-...`,
  `Bearer ...`, `api_key=...`, well-known provider key prefixes), every value stored
  under a secret-looking key (`api_key`, `token`, `client_secret`, `password`, ...), and
  every secret art knows.
- `Secrets.mask` (tool data, stored records): only the secrets art knows, exactly,
  leaving everything else as it is. Cheap when nothing matches, as it almost never does.

The secrets art knows are the values in `llm_params` under secret-looking keys
(`secrets_from_params`), the values of the environment variables that hold API keys
(`environment_secrets`: `OPENAI_API_KEY`, ...), and any part of one of them at least
`MIN_FRAGMENT` characters long (a provider echoing `...KEY-1234567890abcdef`).
A run makes its secrets known to everything that writes on its behalf with
`secrets_in_use` (a context variable, so concurrent runs keep theirs apart).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar, cast

__all__ = [
    "MASK",
    "MIN_FRAGMENT",
    "Secrets",
    "current_secrets",
    "environment_secrets",
    "is_secret_key",
    "known_secrets",
    "redact",
    "secrets_from_params",
    "secrets_in_use",
]

MASK = "***"
#: A part of a known secret at least this long is masked wherever it appears.
MIN_FRAGMENT = 8

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
# Environment variables named like a secret that point at one instead (a file, a URL).
_REFERENCE_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_URL", "_URI", "_HOST", "_LOCATION")

# (pattern, replacement, words): a pattern runs only on a text that holds one of its
# words once case-folded, as each of its matches does, because scanning for a pattern
# tries a match at every word character.
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
    # The password of a URL: postgresql://user:PASSWORD@host, https://user:PASSWORD@proxy
    (
        re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/?#@:]*:)[^\s/?#@]+@"),
        r"\g<head>" + MASK + "@",
        ("://",),
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

# Characters JSON writes as escapes ("\n", "\"" ...), and lone surrogates.
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
# Secret values shorter than this are not masked inside free text (it would mask words).
_MIN_SECRET_LENGTH = 6


def is_secret_key(key: object) -> bool:
    """True for a mapping key whose value should never be shown (api_key, token, password...)."""
    if not isinstance(key, str):
        return False
    normalized = _CAMEL_BOUNDARY.sub("_", key).lower().replace("-", "_").replace(" ", "_")
    return normalized not in _NOT_SECRET_KEYS and bool(_SECRET_KEY.search(normalized))


def secrets_from_params(params: Mapping[str, object] | None) -> frozenset[str]:
    """The string values of `params` stored under secret-looking keys (nested included)."""
    found: set[str] = set()

    def walk(value: object, secret: bool) -> None:
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


def environment_secrets() -> frozenset[str]:
    """The values of environment variables named like keys (OPENAI_API_KEY, ANTHROPIC_API_KEY,
    AWS_SECRET_ACCESS_KEY, HF_TOKEN, ...): litellm reads providers' keys from there."""
    try:
        items = tuple(os.environ.items())
    except RuntimeError:  # another thread changed the environment meanwhile
        items = tuple(os.environ.copy().items())
    return _environment_secrets(items)


@functools.lru_cache(maxsize=8)
def _environment_secrets(items: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return frozenset(
        value
        for name, value in items
        if len(value) >= MIN_FRAGMENT
        and not any(c.isspace() for c in value)
        and is_secret_key(name)
        and not name.upper().endswith(_REFERENCE_SUFFIXES)
        and name != "LITELLM_LOCAL_MODEL_COST_MAP"
    )


class Secrets:
    """A set of secret values, masked wherever they (or a part of at least MIN_FRAGMENT
    characters of one) appear. Immutable; `Secrets()` knows none and costs nothing."""

    __slots__ = ("_blocks", "_exact", "json_plain", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values = frozenset(v for v in values if isinstance(v, str) and len(v) >= 6)
        # Longest first, so a secret containing another is masked whole.
        self._exact = tuple(sorted(self.values, key=len, reverse=True))
        #: True when every secret reads the same inside JSON text (nothing to escape), so
        #: `found_in` may be asked about a JSON document as it is.
        self.json_plain = not any(_JSON_ESCAPED.search(v) for v in self.values)
        # Every part of MIN_FRAGMENT characters or more of a secret holds one of its
        # aligned blocks of MIN_FRAGMENT // 2 characters: those are searched for, and a
        # block found is grown both ways while it matches the secret.
        half = MIN_FRAGMENT // 2
        self._blocks = tuple(
            (secret, start, secret[start : start + half])
            for secret in self._exact
            if len(secret) >= MIN_FRAGMENT
            for start in range(0, len(secret) - half + 1, half)
        )

    def __bool__(self) -> bool:
        return bool(self.values)

    def __or__(self, other: Iterable[str]) -> Secrets:
        values = self.values | frozenset(other)
        return self if values == self.values else _secrets(values)

    def __repr__(self) -> str:
        return f"Secrets({len(self.values)} values)"

    def found_in(self, text: str) -> bool:
        """True when `text` holds one of the secrets or a part of one long enough to mask."""
        return bool(self.values) and self._spans(text, first=True) != []

    def text(self, text: str) -> str:
        """`text` with every secret, and every part of one of MIN_FRAGMENT characters or
        more, replaced by `***`."""
        if not self.values:
            return text
        spans = self._spans(text, first=False)
        if not spans:
            return text
        pieces, end = [], 0
        for start, stop in spans:
            pieces.append(text[end:start])
            pieces.append(MASK)
            end = stop
        pieces.append(text[end:])
        return "".join(pieces)

    def mask(self, value: T) -> T:
        """`value` with the secrets masked in every string (keys included) of its dicts,
        lists and tuples; `value` itself, not a copy, when none holds one."""
        if not self.values:
            return value
        return cast(T, self._mask(value, 0))  # of the same type: only strings change

    def _mask(self, value: object, depth: int) -> object:
        if isinstance(value, str):
            return self.text(value)
        if depth > 200:
            return value
        if isinstance(value, dict):
            changed = False
            items = []
            for key, item in value.items():
                new_key = self.text(key) if isinstance(key, str) else key
                new_item = self._mask(item, depth + 1)
                changed = changed or new_key is not key or new_item is not item
                items.append((new_key, new_item))
            return dict(items) if changed else value
        if isinstance(value, list | tuple):
            new = [self._mask(item, depth + 1) for item in value]
            if all(a is b for a, b in zip(new, value, strict=True)):
                return value
            return tuple(new) if isinstance(value, tuple) else new
        return value

    def _spans(self, text: str, *, first: bool) -> list[tuple[int, int]]:
        """The merged (start, stop) spans of `text` to mask, in order; `first` stops at one."""
        spans: list[tuple[int, int]] = []
        for secret in self._exact:
            if len(secret) < MIN_FRAGMENT:
                at = text.find(secret)
                while at != -1:
                    spans.append((at, at + len(secret)))
                    if first:
                        return spans
                    at = text.find(secret, at + len(secret))
        for secret, offset, block in self._blocks:
            at = text.find(block)
            while at != -1:
                start, stop = at, at + len(block)
                # Grow the match both ways while text and secret agree.
                before = offset
                while before > 0 and start > 0 and text[start - 1] == secret[before - 1]:
                    start -= 1
                    before -= 1
                after = offset + len(block)
                while after < len(secret) and stop < len(text) and text[stop] == secret[after]:
                    stop += 1
                    after += 1
                if stop - start >= MIN_FRAGMENT:
                    spans.append((start, stop))
                    if first:
                        return spans
                at = text.find(block, at + 1)
        if len(spans) < 2:
            return spans
        spans.sort()
        merged = [spans[0]]
        for start, stop in spans[1:]:
            last_start, last_stop = merged[-1]
            if start <= last_stop:
                merged[-1] = (last_start, max(last_stop, stop))
            else:
                merged.append((start, stop))
        return merged


@functools.lru_cache(maxsize=32)
def _secrets(values: frozenset[str]) -> Secrets:
    """One Secrets per set of values: building one costs a few microseconds."""
    return Secrets(values)


_NO_SECRETS = Secrets()
_IN_USE: ContextVar[Secrets] = ContextVar("art_secrets_in_use", default=_NO_SECRETS)


@contextmanager
def secrets_in_use(secrets: Iterable[str]) -> Iterator[Secrets]:
    """Within the block (and the tasks and tool threads it starts), everything art writes
    masks `secrets` and the environment's keys: logs, stored records, stored events."""
    known = _IN_USE.get() | (frozenset(secrets) | environment_secrets())
    token = _IN_USE.set(known)
    try:
        yield known
    finally:
        _IN_USE.reset(token)


def current_secrets() -> Secrets:
    """The secrets made known by the innermost `secrets_in_use` (none outside one)."""
    return _IN_USE.get()


def _redact_text(text: str, secrets: Secrets) -> str:
    text = secrets.text(text)
    if "sk-" in text or "=" in text or ":" in text or " " in text:
        lowered = text.casefold()
        for pattern, replacement, words in _TEXT_PATTERNS:
            if not any(word in lowered for word in words):
                continue
            masked = pattern.sub(replacement, text)
            if masked != text:
                text, lowered = masked, masked.casefold()
    return text


def redact(value: T, secrets: Iterable[str] | Secrets = ()) -> T:
    """`value` with secrets masked: strings rewritten, containers copied and walked.

    Values under secret-looking keys are replaced by `***` whole; other values keep
    their type (numbers, None, ...). Masked everywhere: the known secret shapes, the
    environment's keys, the secrets in use (`secrets_in_use`) and `secrets`, each also
    when only a part of at least MIN_FRAGMENT characters of it appears.
    """
    extra = secrets.values if isinstance(secrets, Secrets) else secrets
    # of the same type, except what could leak whole: an exception becomes its masked text
    return cast(T, _redact(value, known_secrets(extra), 0))


def known_secrets(extra: Iterable[str] = ()) -> Secrets:
    """The secrets in use (`secrets_in_use`), the environment's keys, and `extra`."""
    known = _IN_USE.get() | environment_secrets()
    return known | (s for s in extra if isinstance(s, str)) if extra else known


def _redact(value: object, secrets: Secrets, depth: int) -> object:
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
