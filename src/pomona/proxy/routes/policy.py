"""The policy of a "policy" episode, over HTTP (in-process: `Episode.policy`): take the next held
call, reply to it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from pomona.proxy import openapi
from pomona.proxy.dependencies import JsonBody, UrlPolicy
from pomona.proxy.errors import BadRequest, CallExpired, MalformedRequest

router = APIRouter(prefix="/episodes/{key}/calls")


@router.get("/next")
async def next_policy_call(
    policy: UrlPolicy, timeout: Annotated[float, Query(ge=0, le=600)] = 30.0
) -> Response:
    """The next held call (dialect-neutral); 204 once the episode is over, 408 on timeout. The
    wait holds no thread, so any number of policies may poll at once."""
    try:
        call = await policy.next_call_async(timeout)
    except TimeoutError as e:
        raise BadRequest(408, str(e), "timeout") from None
    if call is None:
        return Response(status_code=204)
    return JSONResponse(
        {
            "sequence": call.sequence,
            "stream": call.stream,
            "model": call.model,
            **call.observation(),
        }
    )


@router.post("/{sequence}/reply", openapi_extra=openapi.body("PolicyReply"))
async def reply_policy_call(sequence: int, policy: UrlPolicy, action: JsonBody) -> Response:
    """Release a held call with {"text", "tool_calls": [{"name", "arguments"}]}."""
    call = policy.held(sequence)
    if call is None:
        raise CallExpired(f"call {sequence} is not waiting")
    try:
        policy.reply(call, action)
    except (ValueError, TypeError) as e:  # the action's shape (neutral.Action.parse)
        raise MalformedRequest(str(e), "invalid_action") from None
    return JSONResponse({"released": sequence})
