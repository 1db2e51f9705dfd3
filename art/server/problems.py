"""Errors as problem details (RFC 9457, `application/problem+json`), never a stack trace.

Every error the API returns has `type`, `title`, `status`, `detail`, `instance` (the
request path) and `code`, a stable machine-readable name (`THREAD_BUSY`, `NOT_FOUND`,
`VALIDATION_ERROR`, ...). An unexpected failure is logged with an id and answered with
that id only.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Required, TypedDict

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from art.core.log import get_logger
from art.errors import ArtError, ConfigurationError, RunErrorCode, SuspensionError

__all__ = [
    "PROBLEM_MEDIA_TYPE",
    "Problem",
    "ProblemBody",
    "install_problem_handlers",
    "openai_error_response",
    "problem_response",
]

log = get_logger("art.server")

PROBLEM_MEDIA_TYPE = "application/problem+json"

# The HTTP status of each art error code the API can meet.
_STATUS_OF_CODE: dict[str, int] = {
    RunErrorCode.THREAD_BUSY: 409,
    RunErrorCode.SUSPENSION_NOT_FOUND: 404,
    RunErrorCode.SUSPENSION_ALREADY_DECIDED: 409,
    "INVALID_DECISION": 422,
    RunErrorCode.PLAN_INVALID: 422,
    "CONFIG_ERROR": 422,
}
_CODE_OF_STATUS: dict[int, str] = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    409: "CONFLICT",
    413: "CONTENT_TOO_LARGE",
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_ERROR",
    429: "TOO_MANY_REQUESTS",
    500: "INTERNAL_ERROR",
    501: "NOT_IMPLEMENTED",
    502: "BAD_GATEWAY",
    503: "UNAVAILABLE",
}


class ProblemBody(BaseModel):
    """The JSON body of every error response."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    instance: str | None = None
    code: str = Field(description="A stable machine-readable name of the error.")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="What was wrong with the request, field by field."
    )
    retry_after_s: float | None = None


class FieldError(TypedDict, total=False):
    """One problem of a request, in a problem document's `errors`."""

    loc: list[int | str]
    msg: Required[str]
    type: str | None


class Problem(Exception):
    """Raised by a handler to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        code: str | None = None,
        errors: list[FieldError] | None = None,
        retry_after_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code or _CODE_OF_STATUS.get(status, "ERROR")
        self.errors = errors
        self.retry_after_s = retry_after_s
        self.headers = dict(headers or {})
        if retry_after_s is not None:
            self.headers.setdefault("Retry-After", str(max(1, round(retry_after_s))))


def problem_response(problem: Problem, instance: str | None = None) -> Response:
    """The response for `problem`."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _title(problem.status),
        "status": problem.status,
        "detail": problem.detail,
        "instance": instance,
        "code": problem.code,
    }
    if problem.errors is not None:
        body["errors"] = problem.errors
    if problem.retry_after_s is not None:
        body["retry_after_s"] = problem.retry_after_s
    return JSONResponse(
        body, status_code=problem.status, headers=problem.headers, media_type=PROBLEM_MEDIA_TYPE
    )


# OpenAI's error `type` for each status (their API's own names).
_OPENAI_TYPES: dict[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


def openai_error_response(problem: Problem) -> Response:
    """`problem` in the shape OpenAI's API gives errors (`{"error": {...}}`), which the
    OpenAI SDKs read: for the OpenAI-compatible routes."""
    kind = _OPENAI_TYPES.get(problem.status)
    if kind is None:
        kind = "server_error" if problem.status >= 500 else "invalid_request_error"
    body = {"error": {"message": problem.detail, "type": kind, "param": None, "code": problem.code}}
    return JSONResponse(body, status_code=problem.status, headers=problem.headers)


def _answer(problem: Problem, request: Request) -> Response:
    """The error response for `request`: OpenAI's shape under /v1, else a problem."""
    path = request.url.path.removeprefix(request.scope.get("root_path") or "")
    if path.startswith("/v1/"):
        return openai_error_response(problem)
    return problem_response(problem, request.url.path)


def from_art_error(exc: ArtError) -> Problem:
    """The problem an `ArtError` raised while serving a request stands for."""
    code = str(exc.code)
    status = _STATUS_OF_CODE.get(code)
    if status is None:
        status = 422 if isinstance(exc, ConfigurationError | SuspensionError) else 500
    retry = getattr(exc, "retry_after_s", None)
    problems = getattr(exc, "problems", None)
    errors: list[FieldError] | None = [{"msg": str(p)} for p in problems] if problems else None
    return Problem(status, exc.message, code=code, errors=errors, retry_after_s=retry)


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _field_errors(exc: RequestValidationError) -> list[FieldError]:
    # Never echo the input back: it may be large, or a secret pasted in the wrong field.
    return [
        {"loc": list(error.get("loc", ())), "msg": error.get("msg", ""), "type": error.get("type")}
        for error in exc.errors()
    ]


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every error, expected or not, with a problem document."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return _answer(exc, request)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else _title(exc.status_code)
        return _answer(Problem(exc.status_code, detail, headers=dict(exc.headers or {})), request)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = _field_errors(exc)
        where = ", ".join(".".join(str(p) for p in e["loc"]) + f": {e['msg']}" for e in errors)
        return _answer(Problem(422, f"the request is not valid ({where})", errors=errors), request)

    async def on_art_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ArtError)
        return _answer(from_art_error(exc), request)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        incident = uuid.uuid4().hex[:12]
        log.error(
            "request failed",
            incident=incident,
            path=request.url.path,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )
        detail = f"the server failed to answer; the failure is logged as incident {incident}"
        return _answer(Problem(500, detail), request)

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ArtError, on_art_error)
    # Not add_exception_handler(Exception, ...): Starlette answers those from its outermost
    # middleware and then re-raises, and uvicorn closes the keep-alive connection.
    app.add_middleware(_UnexpectedErrors, answer=on_unexpected)


class _UnexpectedErrors:
    """ASGI middleware answering an exception no handler took with `answer`'s response,
    keeping the connection open for the client's next request."""

    def __init__(self, app: ASGIApp, answer: Callable[[Request, Exception], Awaitable[Response]]):
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if started:  # too late for an answer: the connection must go
                raise
            response = await self.answer(Request(scope), exc)
            await response(scope, receive, send)
