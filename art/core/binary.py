"""Binary data in tool outputs and metadata (seed 000's attachments).

A tool may return bytes anywhere in `ToolResult.output` or `metadata` (an image, a PDF,
a file's raw content; attachments by convention in `metadata["attachments"]` as
`{"name", "media_type", "data": bytes}`). In Python they stay `bytes`; in JSON (stored
records, `model_dump(mode="json")`, the CLI's `--json`) each is the object
`{"$bytes": "<base64>"}`, read back as `bytes`. An LLM never receives the bytes: prompts
describe them (`<binary data: 2,048 bytes, image/png>`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, TypeAlias

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from art.core.json import JsonScalar

__all__ = [
    "BYTES_KEY",
    "JSON_SCALARS",
    "JsonData",
    "JsonDict",
    "JsonWithBytes",
    "bytes_from_json",
    "bytes_to_json",
    "describe_attachments",
    "describe_bytes",
    "has_bytes",
    "media_type",
]

#: The key of the one-key object that stands for bytes in JSON.
BYTES_KEY = "$bytes"
_BINARY = (bytes, bytearray, memoryview)
#: The exact types of JSON's scalars: values that hold no bytes and are shared, never copied.
JSON_SCALARS = frozenset({str, int, float, bool, type(None)})
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
)


def media_type(data: bytes) -> str:
    """The media type the first bytes of `data` announce, else application/octet-stream."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


def describe_bytes(data: bytes | bytearray | memoryview, kind: str | None = None) -> str:
    """What a prompt says instead of the bytes: `<binary data: 2,048 bytes, image/png>`."""
    raw = bytes(data)
    return f"<binary data: {len(raw):,} bytes, {kind or media_type(raw)}>"


def describe_attachments(metadata: Mapping[str, object]) -> list[str]:
    """A line per attachment in `metadata["attachments"]`: its name and what it holds."""
    attachments = metadata.get("attachments")
    if not isinstance(attachments, list | tuple):
        return []
    lines = []
    for number, attachment in enumerate(attachments, start=1):
        if isinstance(attachment, _BINARY):
            lines.append(f"attachment {number}: {describe_bytes(attachment)}")
        elif isinstance(attachment, Mapping):
            name = attachment.get("name") or f"attachment {number}"
            data = attachment.get("data")
            kind = attachment.get("media_type")
            what = (
                describe_bytes(data, kind if isinstance(kind, str) else None)
                if isinstance(data, _BINARY)
                else "<no data>"
            )
            lines.append(f"{name}: {what}")
    return lines


def has_bytes(value: object) -> bool:
    """Whether `value` holds bytes anywhere in its dicts, lists and tuples."""
    if type(value) in JSON_SCALARS:
        return False
    # Concrete types first: an ABC isinstance check costs more than the rest of the walk.
    items: Iterable[object]
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    elif isinstance(value, _BINARY):
        return True
    elif isinstance(value, Mapping):
        items = value.values()
    else:
        return False
    for item in items:  # noqa: SIM110 - any() over a generator costs a frame per call
        if type(item) not in JSON_SCALARS and has_bytes(item):
            return True
    return False


def bytes_to_json(value: object) -> object:
    """`value` with every bytes value replaced by `{"$bytes": base64}`; `value` itself
    when it holds none."""
    if type(value) in JSON_SCALARS or not has_bytes(value):
        return value
    return _encoded(value)


def _encoded(value: object) -> object:
    if isinstance(value, _BINARY):
        return {BYTES_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {key: _encoded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encoded(item) for item in value]
    return value


def bytes_from_json(value: object) -> object:
    """`value` with every `{"$bytes": base64}` object replaced by the bytes it stands for."""
    if type(value) in JSON_SCALARS:
        return value
    if type(value) is dict:
        encoded = value.get(BYTES_KEY)
        if len(value) == 1 and isinstance(encoded, str):
            try:
                return base64.b64decode(encoded, validate=True)
            except ValueError:
                return value  # not ours: an object that happens to use the key
        return {key: bytes_from_json(item) for key, item in value.items()}
    if type(value) is list:
        return [bytes_from_json(item) for item in value]
    return value


class _BytesInJson:
    """Reads `{"$bytes": base64}` back as bytes from JSON input and writes bytes so in
    JSON output; Python input and output are left as they are, without a Python call."""

    def __get_pydantic_core_schema__(
        self, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=core_schema.no_info_after_validator_function(bytes_from_json, schema),
            python_schema=schema,
            serialization=core_schema.plain_serializer_function_ser_schema(
                bytes_to_json, when_used="json-unless-none"
            ),
        )


#: JSON data that may hold bytes anywhere: a tool's output or metadata once normalized.
JsonWithBytes: TypeAlias = "JsonScalar | bytes | list[JsonWithBytes] | dict[str, JsonWithBytes]"
#: A model field of arbitrary data that may hold bytes: JSON carries them losslessly.
JsonData = Annotated[Any, _BytesInJson()]
#: The same for a dict of such data (`ToolResult.metadata`, a step's arguments).
JsonDict = Annotated[dict[str, Any], _BytesInJson()]
