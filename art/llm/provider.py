"""litellm, the library behind `LiteLLMModel` and the price map: imported on first use
(it takes seconds to import) with art's settings."""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from art.logging import adopt_litellm_loggers, adopting_litellm_loggers

__all__ = ["load_litellm"]


@functools.cache
def load_litellm() -> Any:
    """Import litellm on first use (it takes seconds) with the offline price map; typed Any
    because callers assign its module-level settings, which ModuleType does not allow."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with adopting_litellm_loggers():  # litellm logs while it is still importing
        import litellm
    from litellm.types.utils import Delta, Message, ModelResponseStream, StreamingChoices

    # litellm prints "Give Feedback / Get Help" banners to stdout on every provider error.
    litellm.suppress_debug_info = True
    adopt_litellm_loggers()  # one handler, art's, when the application configured logging
    # litellm's response types build their pydantic schemas on first use and warn about
    # their own TypedDicts then; build them now, quietly, so that applications running
    # with warnings as errors (pytest's filterwarnings) do not fail on litellm's warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Message(content="")
        ModelResponseStream(choices=[StreamingChoices(delta=Delta(content=""))])
        litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": ""}}])
    return litellm
