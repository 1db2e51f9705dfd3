"""art.core.redaction: secrets never leave art, whatever shape they take."""

from __future__ import annotations

import pytest

from art.core.redaction import MASK, is_secret_key, redact, secrets_from_params


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Incorrect API key provided: sk-proj-AbCdEf0123456789xyz.", "sk-proj-AbCdEf0123456789xyz"),
        ("key sk-ant-api03-abcdefghijklmnop rejected", "sk-ant-api03-abcdefghijklmnop"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("https://x/v1?api_key=abcd1234efgh&q=1", "abcd1234efgh"),
        ('{"apiKey": "zyxw9876vuts"}', "zyxw9876vuts"),
        ("password: hunter2hunter2", "hunter2hunter2"),
        (
            "google AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        ),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("gh ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("hf hf_abcdefghijklmnopqrstuvwx", "hf_abcdefghijklmnopqrstuvwx"),
    ],
)
def test_known_secret_shapes_are_masked_in_text(text, secret):
    masked = redact(text)
    assert secret not in masked
    assert MASK in masked


def test_ordinary_text_is_left_alone():
    text = "The answer is 42: computed by calculator (s1) at 10:30, key points below."
    assert redact(text) == text


def test_values_under_secret_keys_are_masked_and_other_values_keep_their_type():
    data = {
        "api_key": "abc",
        "apiKey": "def",
        "headers": {"Authorization": "Basic xyz", "Accept": "json"},
        "client_secret": 12345,
        "max_tokens": 100,
        "temperature": 0.2,
        "stream": True,
        "items": [{"token": "t0k3n"}, None],
        "thread_id": "t-1",
    }
    assert redact(data) == {
        "api_key": MASK,
        "apiKey": MASK,
        "headers": {"Authorization": MASK, "Accept": "json"},
        "client_secret": MASK,
        "max_tokens": 100,
        "temperature": 0.2,
        "stream": True,
        "items": [{"token": MASK}, None],
        "thread_id": "t-1",
    }


def test_the_input_is_not_modified():
    data = {"api_key": "abc", "nested": ["sk-abcdefghijklmnop"]}
    redact(data)
    assert data == {"api_key": "abc", "nested": ["sk-abcdefghijklmnop"]}


def test_named_secrets_are_masked_anywhere():
    secrets = secrets_from_params({"api_key": "plainvalue99", "extra": {"x-token": "tok-777777"}})
    assert secrets == {"plainvalue99", "tok-777777"}
    masked = redact(("failed with plainvalue99", {"msg": "tok-777777 expired"}), secrets)
    assert masked == (f"failed with {MASK}", {"msg": f"{MASK} expired"})


def test_short_values_are_not_treated_as_secrets_in_free_text():
    assert secrets_from_params({"api_key": "x"}) == frozenset()


def test_exceptions_become_masked_text():
    assert redact(ValueError("bad sk-abcdefghijklmnopq")) == f"bad sk-{MASK}"


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("x-api-key", True),
        ("apiKey", True),
        ("access_token", True),
        ("client_secret", True),
        ("db_password", True),
        ("Authorization", True),
        ("key", True),
        ("max_tokens", False),
        ("prompt_tokens", False),
        ("cache_key", False),
        ("thread_id", False),
        (3, False),
    ],
)
def test_secret_key_names(key, secret):
    assert is_secret_key(key) is secret


@pytest.mark.parametrize(
    "text",
    [
        "API_KEY=abcdef123",
        "api\u212aey=abcdef123",  # KELVIN SIGN matches k when case is ignored
        "pa\u017fsword: abcdef123",  # LONG S matches s when case is ignored
        "Authorization: BEARER abcdefghijkl",
        "found AKIA" + "A" * 16 + " in logs",
    ],
)
def test_secret_shapes_are_masked_in_any_case(text):
    # Each pattern runs only on texts holding one of its words once case-folded.
    assert "abcdef123" not in redact(text) and "AAAAAAAAAAAAAAAA" not in redact(text)
    assert "***" in redact(text)


def test_text_without_secret_words_is_left_as_it_is():
    plan = '{"steps": [{"id": "s1", "tool": "search", "args": {"query": "x = 1: y"}}]}' * 40
    assert redact(plan) == plan


# -- the secrets art knows, and their parts ---------------------------------------------------

KEY = "sk-live-KEY-1234567890abcdef"


@pytest.mark.parametrize(
    "text",
    [
        "Incorrect API key provided: ...KEY-1234567890abcdef",  # a provider's echo of the end
        "key starts sk-live-KEY-12 and ends abcdef",  # the start (the end is too short)
        f"twice {KEY} and {KEY}!",
        "a part: 567890ab, in the middle",
    ],
)
def test_a_known_secret_and_any_part_of_it_of_eight_characters_are_masked(text):
    from art.core.redaction import MIN_FRAGMENT, Secrets

    assert MIN_FRAGMENT == 8
    masked = Secrets([KEY]).text(text)
    assert MASK in masked
    for start in range(len(KEY) - 7):
        assert KEY[start : start + 8] not in masked, (KEY[start : start + 8], masked)
    redacted = redact(text, [KEY])
    assert not any(KEY[start : start + 8] in redacted for start in range(len(KEY) - 7))


def test_parts_shorter_than_eight_characters_are_left_alone():
    from art.core.redaction import Secrets

    text = "sk-live plus 1234567 plus abcdef"
    assert Secrets([KEY]).text(text) == text
    assert Secrets([KEY]).text("...KEY-1234567890abcdef") == f"...{MASK}"


def test_masking_data_returns_the_same_objects_when_nothing_is_found():
    from art.core.redaction import Secrets

    secrets = Secrets([KEY])
    clean = {"a": ["x", {"b": "y"}], "n": 1}
    assert secrets.mask(clean) is clean
    dirty = {"a": ["x", {"b": f"got {KEY[4:20]}"}], "n": 1, KEY: "key as a key"}
    masked = secrets.mask(dirty)
    assert masked == {"a": ["x", {"b": f"got {MASK}"}], "n": 1, MASK: "key as a key"}
    assert masked["a"] is not dirty["a"] and dirty["a"][1]["b"] == f"got {KEY[4:20]}"
    assert Secrets().mask(dirty) is dirty


def test_the_environment_s_keys_are_known_and_masked_without_being_named(monkeypatch):
    from art.core.redaction import environment_secrets

    monkeypatch.setenv("ANTHROPIC_API_KEY", "ant-env-key-0123456789")
    monkeypatch.setenv("HF_TOKEN", "hf-env-token-0123456789")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS_FILE", "/run/secrets/google.json")
    monkeypatch.setenv("DB_PASSWORD", "short")
    found = environment_secrets()
    assert {"ant-env-key-0123456789", "hf-env-token-0123456789"} <= found
    assert "/run/secrets/google.json" not in found and "short" not in found
    assert redact("echo: ...key-0123456789 and hf-env-token") == f"echo: ...{MASK} and {MASK}"


def test_secrets_in_use_reach_every_redact_within_the_block():
    from art.core.redaction import current_secrets, secrets_in_use

    assert not current_secrets()
    with secrets_in_use(["params-key-abcdefgh"]):
        assert redact("saw params-key-abcdefgh") == f"saw {MASK}"
        assert "params-key-abcdefgh" in current_secrets().values
    assert redact("saw params-key-abcdefgh") == "saw params-key-abcdefgh"
