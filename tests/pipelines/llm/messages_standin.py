"""A stand-in of Anthropic's Messages API on 127.0.0.1, checked against the anthropic SDK's own types.

Every request's JSON body is validated as `anthropic.types.MessageCreateParams` (no key the SDK does not declare,
the required ones present, each value of its declared type); every answer is built as the SDK's pydantic models
(`Message`, or the stream's `RawMessageStartEvent` ... `RawMessageStopEvent`) and serialised with `model_dump`, so
the real `anthropic.Anthropic(base_url=...)` client parses what a real server would send. Answers are scripted: a
list of strings (or callables of the request body) served in order. A request that fails the check is answered 400
and kept in `rejected`, and the test fails on it (`check()`).
"""

from __future__ import annotations

import json
import threading
import typing
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pydantic
from anthropic import types
from anthropic.types import message_create_params

Script = str | Callable[[dict], str]
PARAMS = message_create_params.MessageCreateParamsBase
REQUIRED = {"model", "max_tokens", "messages"}
CHUNK = 40  # characters per text delta: a long answer arrives in several events


def _declared_keys() -> set[str]:
    return set(typing.get_type_hints(PARAMS, include_extras=True)) | {"stream"}


def validate(body: dict) -> str:
    """Why `body` is not a MessageCreateParams the SDK could have sent ("" when it is one)."""
    unknown = set(body) - _declared_keys()
    if unknown:
        return f"unknown keys {sorted(unknown)}"
    missing = REQUIRED - set(body)
    if missing:
        return f"missing keys {sorted(missing)}"
    kind = message_create_params.MessageCreateParamsStreaming if body.get("stream") else PARAMS
    try:
        pydantic.TypeAdapter(kind).validate_python(body, strict=False)
    except pydantic.ValidationError as exc:
        return str(exc).splitlines()[0]
    return ""


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)  # deterministic, about what a tokenizer gives for English and code


class MessagesStandin:
    def __init__(self, answers: list[Script] | None = None, api_key: str = "test-key"):
        self.answers = list(answers or [])
        self.api_key = api_key
        self.requests: list[dict] = []
        self.rejected: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> MessagesStandin:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def check(self) -> None:
        assert not self.rejected, self.rejected

    def prompts(self) -> list[str]:
        """The user turns' text of every request, in order (what was sent to the API)."""
        return ["\n".join(str(m["content"]) for m in r["messages"]) for r in self.requests]

    # --- answers -------------------------------------------------------------------------------------------

    def _next_text(self, body: dict) -> str:
        with self._lock:
            self.requests.append(body)
            script = self.answers.pop(0) if self.answers else "NONE"
        return script(body) if callable(script) else script

    def message(self, body: dict, text: str) -> types.Message:
        return types.Message(
            id=f"msg_standin_{len(self.requests)}",
            type="message",
            role="assistant",
            model=body["model"],
            content=[types.TextBlock(type="text", text=text)],
            stop_reason="end_turn",
            stop_sequence=None,
            usage=types.Usage(input_tokens=_tokens(json.dumps(body)), output_tokens=_tokens(text)),
        )

    def events(self, body: dict, text: str) -> list[pydantic.BaseModel]:
        whole = self.message(body, text)
        start = whole.model_copy(update={"content": [], "stop_reason": None})
        start.usage = types.Usage(input_tokens=whole.usage.input_tokens, output_tokens=1)
        deltas = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
        return [
            types.RawMessageStartEvent(type="message_start", message=start),
            types.RawContentBlockStartEvent(
                type="content_block_start", index=0, content_block=types.TextBlock(type="text", text="")
            ),
            *(
                types.RawContentBlockDeltaEvent(
                    type="content_block_delta", index=0, delta=types.TextDelta(type="text_delta", text=piece)
                )
                for piece in deltas
            ),
            types.RawContentBlockStopEvent(type="content_block_stop", index=0),
            types.RawMessageDeltaEvent(
                type="message_delta",
                delta={"stop_reason": "end_turn", "stop_sequence": None},
                usage=types.MessageDeltaUsage(output_tokens=whole.usage.output_tokens),
            ),
            types.RawMessageStopEvent(type="message_stop"),
        ]

    # --- HTTP ----------------------------------------------------------------------------------------------

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def _json(self, status: int, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _refuse(self, status: int, kind: str, why: str) -> None:
                standin.rejected.append(why)
                self._json(status, {"type": "error", "error": {"type": kind, "message": why}})

            def do_POST(self) -> None:
                if self.path.split("?")[0] != "/v1/messages":
                    return self._refuse(404, "not_found_error", f"no such endpoint {self.path}")
                # the SDK of this version authenticates with a bearer token; older ones with x-api-key
                keys = {
                    self.headers.get("x-api-key"),
                    (self.headers.get("authorization") or "").removeprefix("Bearer "),
                }
                if standin.api_key not in keys:
                    return self._refuse(401, "authentication_error", "invalid API key")
                if not self.headers.get("anthropic-version"):
                    return self._refuse(400, "invalid_request_error", "anthropic-version header missing")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                why = validate(body)
                if why:
                    return self._refuse(400, "invalid_request_error", why)
                text = standin._next_text(body)
                if not body.get("stream"):
                    return self._json(200, standin.message(body, text).model_dump(mode="json", exclude_none=True))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for item in standin.events(body, text):
                    data = item.model_dump(mode="json", exclude_none=True)
                    self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

        return Handler
