"""A loopback OpenAI-compatible chat-completions server that stands in for a judge model.

Tests, benchmarks and the fault-injection suite need a real HTTP server that speaks the OpenAI
chat completions API, so that the whole client stack (instructor over litellm over httpx/aiohttp)
runs exactly as in production. :class:`OpenAIStandIn` is that server: an aiohttp application on
127.0.0.1, in a background thread (``with``) or on the caller's event loop (``async with``).

::

    with OpenAIStandIn(latency=0.2, faults=FaultPlan({"rate_limit": 0.1}, seed=7)) as srv:
        srv.base_url          # "http://127.0.0.1:PORT/v1"
        ...                   # point litellm at it: model="openai/standin", api_base=srv.base_url
        srv.stats().outcomes  # {"ok": 91, "rate_limit": 9}

The package: :mod:`~standins.openai_server.wire` (the API's request and answer shapes),
:mod:`~standins.openai_server.plan` (fault plans), :mod:`~standins.openai_server.replies`
(answers per structured-output mode, faults applied), :mod:`~standins.openai_server.ledger`
(counters and recorded requests), :mod:`~standins.openai_server.runner` (the loopback life
cycle), :mod:`~standins.openai_server.server` (the endpoints) and
:mod:`~standins.openai_server.cli`. The names below are its public API.

Endpoints: ``POST /v1/chat/completions`` (also streamed as SSE when ``stream: true``),
``GET /v1/models``, ``GET /health``. Only chat completions count in :meth:`OpenAIStandIn.stats`.

Strict by default, like the real API
------------------------------------
OpenAI's API answers a chat-completions body with any top-level field it does not document with
HTTP 400 and ``{"error": {"message": "Unrecognized request argument supplied: <name>", "type":
"invalid_request_error", "param": null, "code": null}}`` (several unknown fields: "Unrecognized
request arguments supplied: a, b"). The stand-in does the same, so a client that leaks a private
keyword into the body (instructor's old ``validation_context``, a litellm-only option) fails here
as it would in production. The documented fields are :func:`openai_chat_params`, read from the
installed ``openai`` package's ``CompletionCreateParams`` so the list follows the SDK. Only
top-level names are checked: nested objects (``response_format``, ``tools``...) are checked only
as far as the answer needs them, so llama.cpp's ``response_format: {"type": "json_object",
"schema": ...}`` (the product's ``json_object_schema`` mode, meant for lenient local servers)
passes. ``OpenAIStandIn(strict=False)`` (CLI ``--lenient``) accepts unknown top-level fields, as
llama.cpp, vLLM and Ollama do; use it only to test that switch or a local-server dialect.

Every chat-completions body that parses as a JSON object is recorded in
:attr:`OpenAIStandIn.requests`, rejected ones included (their 400 messages are in
:attr:`OpenAIStandIn.rejections`); a rejected body draws no fault from the :class:`FaultPlan`.

Default answers (no ``handler``) are *valid* for the request's own schema:

- ``tools`` present (``tool_choice`` naming a function, ``"required"``, ``"auto"`` or absent): one
  call to the named (else the first) function, its ``arguments`` an instance of the function's
  ``parameters`` schema (:func:`standins.schemas.schema_instance`).
  ``tool_choice: "none"`` is answered as a plain request.
- ``response_format: {"type": "json_schema"}``: the content is an instance of that schema.
- ``response_format: {"type": "json_object"}``: the schema embedded in the messages after the word
  ``json_schema`` (instructor's ``JSON`` mode), else ``{}``.
- no ``response_format`` but a schema embedded after ``json_schema`` (instructor's ``MD_JSON``
  mode): the instance inside a fenced json code block.
- anything else is a plain request: ``plain_reply`` when given, else
  ``"[Included Bonus Points]: 1"`` when the prompt contains ``[Bonus Points]`` (the CharToM-QA
  coverage prompt), else ``"[Defect]: None"``.

A ``handler`` replaces the default: a callable ``handler(request_json) -> ReplyLike`` (may be
async), or a sequence of replies consumed in order (a request after the last one gets a 500 and
counts as ``handler_error``). A :data:`ReplyLike` is a :class:`Reply` (sent as is), or a payload
placed where the request's mode expects it: a ``str`` verbatim, a dict/list serialised as JSON
(tool-call arguments in tools mode, fenced in MD_JSON mode, the content otherwise).

Faults (:class:`FaultPlan`) are decided per chat-completion request, from a seeded RNG or a
scripted sequence; see :data:`FaultKind` for what each does. Token counts in ``usage`` are a
deterministic estimate (``max(words, chars / 4)`` per text, CJK-aware via :mod:`core.text`).
With ``prompt_cache=`` the answers also report ``usage.prompt_tokens_details.cached_tokens``,
the prefix of the prompt already processed, as a provider with prefix caching does (the rule is
:mod:`~standins.openai_server.prompt_cache`'s; the ledger sums it in ``stats().cached_tokens``).

How the client stack reacts
---------------------------
Observed with litellm 1.106.2, instructor 1.17.0, openai 2.54 (``tests/standins/
test_openai_standin.py`` pins the modes, exceptions, re-asks, refusal and usage lines; the
litellm-retry and cost lines were checked by hand), calling
``instructor.from_litellm(litellm.acompletion, mode=...)`` and
``client.chat.completions.create(model="openai/standin", api_base=base_url, api_key="sk-test",
response_model=M, max_retries=N, num_retries=0, timeout=T)``:

- All four modes round-trip: ``TOOLS`` sends ``tools`` + ``tool_choice: {"type": "function",
  "function": {"name": <Model>}}``; ``JSON_SCHEMA`` sends ``response_format: {"type":
  "json_schema", "json_schema": {"name", "schema"}}``; ``JSON`` sends ``response_format:
  {"type": "json_object"}`` and appends the schema to the system message (after the words
  "json_schema:"); ``MD_JSON`` sends no ``response_format``, the same system text, and expects a
  fenced json code block. litellm strips the ``openai/`` prefix: the server sees
  ``model: "standin"``.
- Every failure of the HTTP call is wrapped by instructor, even with ``max_retries=0``:
  ``instructor.core.InstructorRetryException`` (the same class as
  ``instructor.exceptions.InstructorRetryException``, which is a deprecated import path) with
  ``n_attempts == 1``, ``last_completion is None``, ``failed_attempts == []``, zero
  ``total_usage``, and the litellm exception as ``__cause__``. instructor never retries these
  (``max_retries`` only counts validation re-asks); with ``num_retries=0`` litellm does not
  either, so the server sees exactly one request. Without ``num_retries=0`` litellm retries
  internally (a 500 then a 500 then success is 3 requests and no error).
- The ``__cause__`` (also what a bare ``litellm.acompletion`` raises), all under
  ``litellm.exceptions`` (re-exported as ``litellm.X``) and subclasses of ``openai.APIError``:

  - 429 -> ``litellm.RateLimitError``, ``status_code == 429``. The ``Retry-After`` value is in
    ``exc.litellm_response_headers["retry-after"]`` (an ``httpx.Headers``; a string, e.g.
    ``"7"``); ``exc.response.headers`` does not carry it.
  - 500 -> ``litellm.InternalServerError`` (500); 502 -> ``litellm.BadGatewayError`` (502);
    503 -> ``litellm.ServiceUnavailableError`` (503). Use ``status_code`` rather than the class.
  - client timeout (``timeout=`` seconds) -> ``litellm.Timeout`` (subclass of
    ``openai.APITimeoutError`` and ``openai.APIConnectionError``), ``status_code == 408``.
  - connection reset -> ``litellm.InternalServerError`` with ``status_code == 500`` and message
    ``"... OpenAIException - Connection error."``; its ``__context__`` chain is litellm's
    ``OpenAIError`` -> ``openai.APIConnectionError`` -> ``httpx.ConnectError`` ->
    ``aiohttp.ClientOSError`` (errno 104, "Connection reset by peer"): litellm sends through
    aiohttp. Tell it from a real 500 by that chain or the message, not the class.
- ``finish_reason: "length"`` -> ``instructor.core.IncompleteOutputException`` raised directly
  (not wrapped, no re-ask even with ``max_retries=2``: one request), with ``last_completion`` set,
  in all four modes.
- ``malformed_json`` and ``invalid`` -> instructor re-asks: with ``max_retries=2`` the server sees
  3 requests (the re-ask appends the bad assistant message and a tool/user message quoting the
  pydantic error), then ``InstructorRetryException`` with ``n_attempts == 3``,
  ``last_completion`` (the last ``litellm.ModelResponse``), ``failed_attempts`` (a list of
  ``instructor.core.FailedAttempt(attempt_number, exception, completion)``, the exception a
  ``pydantic.ValidationError``), ``total_usage`` (an ``openai`` ``CompletionUsage`` summed over
  attempts) and ``__cause__`` the last ``pydantic.ValidationError`` (``json_invalid`` for
  malformed JSON, ``literal_error``/``missing`` for invalid). A re-ask that then succeeds returns
  normally. The ``duplicate`` variant passes a model that has no uniqueness validator.
- ``refusal`` and ``empty`` are not recognised as such: they are re-asked like a parse failure
  and end in ``InstructorRetryException`` whose cause is
  ``instructor.core.ResponseParsingError("No tool calls or function call found ...")`` in
  ``TOOLS`` mode, a ``pydantic.ValidationError`` (``json_invalid`` on ``''``) in the JSON modes.
  To classify a refusal, read ``exc.last_completion.choices[0].message``: litellm's ``Message``
  has no ``refusal`` attribute; the text is in ``message.provider_specific_fields["refusal"]``
  (``content`` None, ``tool_calls`` None).
- Usage: ``create_with_completion`` returns ``(model, completion)``; ``completion.usage``
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``) is summed over all attempts,
  re-asks included (it equals the server's own totals). Cost: ``litellm.completion_cost(
  completion)`` raises ``litellm.exceptions.ModelNotMappedError`` (a plain ``Exception``
  subclass) for a model litellm does not know, and
  ``completion._hidden_params["response_cost"]`` is None. Pass ``custom_cost_per_token=
  {"input_cost_per_token": ..., "output_cost_per_token": ...}`` to ``completion_cost``, or
  call ``litellm.register_model({"openai/standin": {...}})`` first (then ``response_cost`` is
  filled in too).
- A plain ``litellm.acompletion`` returns ``ModelResponse`` with ``choices[0].message.content``;
  ``stream=True`` (with ``stream_options={"include_usage": True}``) yields chunks and a final
  usage chunk. instructor's ``create(..., stream=True)`` is not a streaming path through
  litellm (use ``create_partial``); the product does not stream.
- Set ``litellm.suppress_debug_info = True`` to stop litellm printing a help banner on stdout
  for every error.
- instructor takes the validators' context as ``context=``; ``validation_context=`` is no
  parameter of instructor 1.17's ``create``/``create_with_completion``, so it stays in the
  completion kwargs, and litellm sends every keyword it does not consume in the request body.
  The strict stand-in answers that with 400 -> ``litellm.BadRequestError`` (``status_code ==
  400``), wrapped in ``InstructorRetryException`` like any HTTP failure. litellm's own options
  (``api_base``, ``api_key``, ``timeout``, ``num_retries``, ``extra_body``) never reach the body;
  ``extra_body`` is merged into it.
"""

from __future__ import annotations

from standins.openai_server.cli import main
from standins.openai_server.ledger import StandInStats
from standins.openai_server.plan import FAULT_KINDS, FaultKind, FaultPlan
from standins.openai_server.prompt_cache import OPENAI_PROMPT_CACHE
from standins.openai_server.server import OpenAIStandIn
from standins.openai_server.wire import (
    Handler,
    Reply,
    ReplyLike,
    ToolCall,
    openai_chat_params,
)

__all__ = [
    "FAULT_KINDS",
    "OPENAI_PROMPT_CACHE",
    "FaultKind",
    "FaultPlan",
    "Handler",
    "OpenAIStandIn",
    "Reply",
    "ReplyLike",
    "StandInStats",
    "ToolCall",
    "main",
    "openai_chat_params",
]
