"""What wraps every HTTP request, as plain ASGI (no buffering: streams stay streams): a request
id in `X-Request-ID` and in every error body, and the body size limit, checked against the
declared length first and then against what actually arrives."""

from __future__ import annotations

import secrets

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pomona.orchestrator.server.errors import error_response


class RequestEnvelope:
    def __init__(self, app: ASGIApp, max_body: int):
        self.app, self.max_body = app, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_id = secrets.token_hex(8)
        scope.setdefault("state", {})["request_id"] = request_id
        header = (b"x-request-id", request_id.encode())
        length = dict(scope["headers"]).get(b"content-length")
        too_large = (
            f"the request body is over the {self.max_body} byte limit; send less (tar "
            "uploads and raw files are cheaper than base64 JSON)"
        )
        if length and length.isdigit() and int(length) > self.max_body:
            response = error_response(413, "TooLarge", too_large, request_id)
            response.headers["X-Request-ID"] = request_id
            return await response(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                raise HTTPException(413, too_large)  # inside a route: answered as TooLarge
            return message

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        await self.app(scope, limited, stamped)
