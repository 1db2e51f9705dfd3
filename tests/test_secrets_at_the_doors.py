"""Secrets that reached no answer before: a storage URL's password in a configuration
error, and the password of an `api_base` in the provider SDK's debug log."""

from __future__ import annotations

import io

import pytest

from art.errors import ConfigurationError
from art.logging import configure_logging
from art.storage.opening import open_storage
from art.testing import Answer, FakeProvider


@pytest.mark.parametrize(
    "url", ["mysql://admin:Pa55word-xyz@db.example:3306/art", "postgressql://u:Pa55word-xyz@h/x"]
)
def test_an_unknown_storage_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown storage URL") as refused:
        open_storage(url)
    assert "Pa55word-xyz" not in str(refused.value)
    assert ":***@" in str(refused.value)


@pytest.mark.usefixtures("restore_logging")
async def test_the_sdks_debug_log_of_a_call_to_an_api_base_with_credentials_masks_the_password(
    fake_provider: FakeProvider,
) -> None:
    """What `-vv` shows: the OpenAI SDK's own request line passes art's log chain."""
    import openai

    out = io.StringIO()
    configure_logging(json=True, level="DEBUG", stream=out)
    base = fake_provider.openai_base.replace("http://", "http://proxyuser:Pr0xyPassw0rd@")
    fake_provider.queue(Answer("done"))
    client = openai.AsyncOpenAI(base_url=base, api_key="test-key", max_retries=0)
    async with client:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    logged = out.getvalue()
    assert "Sending HTTP Request: POST http://proxyuser:***@127.0.0.1" in logged
    assert "Pr0xyPassw0rd" not in logged
