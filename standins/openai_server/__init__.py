"""A loopback server that stands in for a judge model: OpenAI's, Anthropic's and Gemini's APIs.

Tests, benchmarks and the fault-injection suite need a real HTTP server that speaks a provider's
API, so that the whole client stack (instructor over litellm over httpx/aiohttp) runs exactly as
in production. :class:`OpenAIStandIn` is that server: an aiohttp application on 127.0.0.1, in a
background thread (``with``) or on the caller's event loop (``async with``). It speaks OpenAI's
chat completions, Anthropic's Messages API and Gemini's ``generateContent`` on one port, with
one handler, one fault plan and one set of books for all three.

::

    with OpenAIStandIn(latency=0.2, faults=FaultPlan({"rate_limit": 0.1}, seed=7)) as srv:
        srv.base_url            # "http://127.0.0.1:PORT/v1"      model="openai/standin"
        srv.anthropic_base_url  # "http://127.0.0.1:PORT"         model="anthropic/claude-..."
        srv.gemini_base_url     # "http://127.0.0.1:PORT/v1beta"  model="gemini/gemini-2.5-flash"
        ...                     # point litellm at one: api_base=<that URL>
        srv.stats().outcomes    # {"ok": 91, "rate_limit": 9}
        srv.stats().families    # {"openai": 60, "anthropic": 40}

The package: :mod:`~standins.openai_server.wire` (OpenAI's request and answer shapes, and what
the wires share), :mod:`~standins.openai_server.anthropic_wire` and
:mod:`~standins.openai_server.gemini_wire` (the other two APIs' shapes),
:mod:`~standins.openai_server.families` (each wire's HTTP answers),
:mod:`~standins.openai_server.plan` (fault plans), :mod:`~standins.openai_server.replies`
(answers per structured-output mode, faults applied), :mod:`~standins.openai_server.ledger`
(counters and recorded requests), :mod:`~standins.openai_server.runner` (the loopback life
cycle), :mod:`~standins.openai_server.server` (the endpoints and the shared pipeline) and
:mod:`~standins.openai_server.cli`. The names below are its public API.

Endpoints: ``POST /v1/chat/completions`` (also streamed as SSE when ``stream: true``),
``POST /v1/messages`` (Anthropic), ``POST /{v1beta,v1,v1alpha}/models/{model}:generateContent``
(Gemini), ``GET /v1/models`` (OpenAI's list), ``GET /health``. The three generation routes count
in :meth:`OpenAIStandIn.stats` (``families`` splits ``requests`` by wire) and are recorded in
:attr:`OpenAIStandIn.requests`, each body as its wire sent it (:attr:`OpenAIStandIn.
request_families` says which). Any other ``POST`` is a 404 in the error shape its path suggests,
naming the three ``api_base`` values: a client pointed at the wrong base (the OpenAI habit of
``.../v1`` on the Anthropic adapter posts to ``/v1/v1/messages``) is told which is right. It
counts nowhere.

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

The other wires are as strict as their APIs (``strict=False`` lifts these checks too):

- Anthropic: a top-level field outside :data:`ANTHROPIC_MESSAGE_PARAMS` (and, from a request
  with an ``anthropic-beta`` header, :data:`ANTHROPIC_BETA_MESSAGE_PARAMS`) is a 400 ``{"type":
  "error", "error": {"type": "invalid_request_error", "message": "<field>: Extra inputs are not
  permitted"}}`` (the first such field, in body order); a missing ``model``, ``max_tokens`` or
  ``messages`` is ``"<field>: Field required"``; a missing ``anthropic-version`` header is
  ``"anthropic-version: header is required"``. ``system`` may be a string or a list of text
  blocks; ``tools`` need ``name`` and (custom tools) ``input_schema``; ``tool_choice`` is
  ``auto``, ``any``, ``tool`` (naming an offered tool) or ``none``. ``stream: true`` is refused
  with a 400: the stand-in does not stream this wire.
- Gemini: a field outside ``GenerateContentRequest`` (:data:`GEMINI_REQUEST_FIELDS`) or its
  ``generationConfig`` (:data:`GEMINI_GENERATION_CONFIG_FIELDS`) is a 400 ``{"error": {"code":
  400, "message", "status": "INVALID_ARGUMENT", "details": [a BadRequest with
  fieldViolations]}}``, the message ``Invalid JSON payload received. Unknown name "<field>":
  Cannot find field.`` (``... Unknown name "<field>" at 'generation_config': ...`` inside it;
  every unknown field, one per line). Each field may be spelt by its proto name or its JSON
  name (``system_instruction``, ``systemInstruction``), as Google's parser takes both and
  litellm mixes them. Vertex AI's ``labels`` is not a Gemini API field. ``contents`` is
  required.

Every generation request body that parses as a JSON object is recorded in
:attr:`OpenAIStandIn.requests`, rejected ones included (their 400 messages are in
:attr:`OpenAIStandIn.rejections`); a rejected body draws no fault from the :class:`FaultPlan`.
With ``api_key=`` set, a request without the key gets its API's answer and counts as
``unauthorized``: OpenAI's 401 ``invalid_api_key`` (``Authorization: Bearer``), Anthropic's 401
``authentication_error`` (``x-api-key``; "x-api-key header is required" / "invalid x-api-key"),
Gemini's 400 ``INVALID_ARGUMENT`` "API key not valid. Please pass a valid API key." with reason
``API_KEY_INVALID`` for a wrong key (``x-goog-api-key`` header or ``?key=``), 403
``PERMISSION_DENIED`` for none, as Google answers. ``check_model=True`` answers a model outside
``models`` with the API's 404 (``not_found_error`` "model: X"; Google's ``NOT_FOUND``
"models/X is not found for API version v1beta, ...").

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

The other wires read their own structured-output fields, and otherwise answer by the same rules
(the prompt read from ``system``/``systemInstruction`` and the messages):

- Anthropic: ``tool_choice`` ``{"type": "tool", "name": N}`` or ``{"type": "any"}`` (the named,
  else the first tool) -> one ``tool_use`` block whose ``input`` is an instance of the tool's
  ``input_schema``, ``stop_reason: "tool_use"``; ``auto``, ``none`` or no ``tool_choice`` -> a
  ``text`` block. ``output_format`` (beta) or ``output_config.format`` ``{"type":
  "json_schema", "schema"}`` -> a text block holding an instance. A schema embedded in the
  prompt after ``json_schema`` (instructor's ``JSON``/``MD_JSON``) -> its instance as the text,
  in a fenced json block when the prompt asks for one (```` ```json ````, ``MD_JSON``), bare
  otherwise. ``stop_reason`` ``end_turn``; ``usage`` ``{"input_tokens", "output_tokens",
  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}``; a ``request-id`` header.
- Gemini: ``toolConfig.functionCallingConfig.mode`` ``ANY`` (the first of
  ``allowedFunctionNames``, else the first declaration) -> one ``functionCall`` part whose
  ``args`` are an instance of the declaration's ``parameters`` (Google's schema dialect, upper
  case types ``OBJECT``/``STRING``... read as JSON Schema) or ``parametersJsonSchema``; ``AUTO``,
  ``NONE`` or no ``toolConfig`` -> text. ``generationConfig.responseMimeType`` (or
  ``response_mime_type``) ``application/json`` -> a text part holding an instance of
  ``responseJsonSchema``, else of ``responseSchema`` (Google's dialect), else of the schema the
  prompt embeds (instructor's ``json_schema`` marker, or litellm's ``Use this JSON schema:``
  block, a Python ``repr``), else ``{}``. Other text as on the Anthropic wire. ``finishReason``
  ``STOP``; ``usageMetadata`` ``{"promptTokenCount", "candidatesTokenCount",
  "totalTokenCount"}``; ``modelVersion`` is the model in the path.

A ``handler`` replaces the default: a callable ``handler(request_json) -> ReplyLike`` (may be
async), or a sequence of replies consumed in order (a request after the last one gets a 500 and
counts as ``handler_error``). A :data:`ReplyLike` is a :class:`Reply` (sent as is), or a payload
placed where the request's mode expects it: a ``str`` verbatim, a dict/list serialised as JSON
(tool-call arguments in tools mode, fenced in MD_JSON mode, the content otherwise).

A handler's payload is placed the same way on every wire: a dict is the tool input (``tool_use``
``input``, ``functionCall`` ``args``) in tools mode and JSON text otherwise; a :class:`Reply` is
translated (its content a text block/part, its tool calls ``tool_use``/``functionCall``). A
callable handler gets the body as its wire sent it (``messages``/``max_tokens`` from Anthropic,
``contents`` from Gemini).

Faults (:class:`FaultPlan`) are decided per generation request, whatever its wire, from one
seeded RNG or scripted sequence consumed in arrival order; see :data:`FaultKind` for what each
does. On the Anthropic and Gemini wires they take each API's form:

- ``rate_limit``: 429 with ``retry-after`` (Anthropic ``rate_limit_error``; Google
  ``RESOURCE_EXHAUSTED`` with the delay also as ``RetryInfo.retryDelay``, e.g. ``"7s"``, in
  ``details``, where Google states it); ``rate_limit_no_header``: neither.
- ``server_error``: the plan's status with Anthropic's ``api_error`` (``overloaded_error``
  "Overloaded" for 529, which a plan may list: ``server_error_statuses=(529,)``;
  ``timeout_error`` for 504) or Google's ``INTERNAL`` (500), ``UNAVAILABLE`` (502, 503: "The
  model is overloaded. Please try again later.", Google's words).
- ``truncated``: ``stop_reason: "max_tokens"`` / ``finishReason: "MAX_TOKENS"``, the payload cut
  in half. Both APIs carry a tool's arguments as a parsed object, so a payload that is no JSON
  object (truncated or ``malformed_json`` in tools mode) travels as a text block/part instead of
  the ``tool_use``/``functionCall``: the model answered in prose.
- ``refusal``: Anthropic ``stop_reason: "refusal"`` with the refusal text in a text block;
  Gemini a candidate with ``finishReason: "SAFETY"``, a safety rating and no ``content``. Plain
  requests get the refusal text as an ordinary answer, as on the OpenAI wire.
- ``empty``: Anthropic ``content: []``; Gemini one empty text part.
- ``timeout`` and ``reset``: as on the OpenAI wire.

Token counts in ``usage`` are a deterministic estimate (``max(words, chars / 4)`` per text,
CJK-aware via :mod:`core.text`), the same rule on every wire (the prompt: every message's text,
the system prompt, and the tool and schema definitions as JSON). With ``prompt_cache=`` the
OpenAI answers also report ``usage.prompt_tokens_details.cached_tokens``, the prefix of the
prompt already processed, as a provider with prefix caching does (the rule is
:mod:`~standins.openai_server.prompt_cache`'s; the ledger sums it in ``stats().cached_tokens``);
the Anthropic and Gemini answers report no cache hits.

How the client stack reacts: OpenAI
-----------------------------------
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

How the client stack reacts: Anthropic
--------------------------------------
Observed with the same versions (``tests/standins/test_provider_wires.py`` pins the URLs,
modes, exceptions, faults, usage and cost lines and the three schema rewrites; the beta-header
fetch was read in litellm's source and seen once offline), calling
``model="anthropic/claude-sonnet-4-5-20250929"`` (in litellm's cost map) or
``"anthropic/claude-3-5-sonnet-20241022"`` (not in it), ``api_base=srv.anthropic_base_url``:

- litellm posts to ``{api_base}/v1/messages`` (it appends ``/v1/messages`` unless the base
  already ends with it), so the base is the server root, ``http://127.0.0.1:PORT``; ``.../v1``
  posts to ``/v1/v1/messages`` and gets the naming 404 (``litellm.NotFoundError``). Headers:
  ``x-api-key: <api_key>``, ``anthropic-version: 2023-06-01``, plus ``anthropic-beta:
  structured-outputs-2025-11-13`` with ``output_format``. Body: ``model`` without the prefix,
  ``messages`` (contents as text blocks), ``system`` as a list of text blocks, ``max_tokens``
  (the model's maximum from the cost map when not given: 64000 for Sonnet 4.5; 4096 for a model
  the map lacks). Set ``LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True``: otherwise litellm fetches
  its beta-header table from GitHub on the first Anthropic call (offline it logs a warning and
  falls back to its bundled copy).
- All four instructor modes round-trip. ``TOOLS``: ``tools`` (``input_schema``, ``type:
  "custom"``) and ``tool_choice: {"type": "tool", "name": <Model>}``, answered by ``tool_use``
  (litellm turns it into ``tool_calls``). ``JSON_SCHEMA``: for a model the cost map says supports
  response schemas, ``output_format: {"type": "json_schema", "schema"}`` answered by JSON text;
  litellm rewrites that schema (``$defs`` inlined, ``additionalProperties: false``, and
  ``minItems``/``maxItems`` moved into a ``description`` note, "Note: minimum number of items:
  3, ...": Anthropic's structured outputs take no item counts above 1, so a list of exactly
  *n* verdicts is asked for in prose only, and the stand-in's schema-valid answer has one item).
  For other models litellm forces a tool ``json_tool_call`` carrying the schema (refs written
  ``/$defs/X``, which the stand-in resolves as Anthropic does) and turns its input back into
  message content. ``JSON`` and ``MD_JSON``: the schema in the system text, the answer bare or
  fenced. Usage: ``prompt_tokens``/``completion_tokens`` are ``input_tokens``/``output_tokens``
  (equal to the ledger's); ``_hidden_params["response_cost"]`` is filled in for a model the
  cost map lists (it equals ``stats().cost("claude-sonnet-4-5-20250929")``), None otherwise.
- ``extra_body`` is *not* merged on this adapter: litellm sends a literal top-level
  ``extra_body`` field, which the strict wire (like Anthropic) refuses: ``litellm.
  BadRequestError`` "extra_body: Extra inputs are not permitted". Any 400 is
  ``litellm.BadRequestError`` (``status_code == 400``).
- Errors, all ``litellm.exceptions`` (wrapped in ``InstructorRetryException`` by instructor, as
  on the OpenAI wire): 401 -> ``AuthenticationError``; 404 -> ``NotFoundError``; 429 ->
  ``RateLimitError``, ``exc.litellm_response_headers["retry-after"]`` is the header (``"7"``);
  500 -> ``InternalServerError``; 502 -> ``BadGatewayError``; 503 ->
  ``ServiceUnavailableError``; 529 ``overloaded_error`` -> ``InternalServerError`` with
  ``status_code == 500`` (litellm matches the text "overloaded_error" before the status);
  client timeout -> ``litellm.Timeout`` (408).
- A connection reset is sent again: litellm's own HTTP handler (which this adapter and Gemini's
  use; ``openai/`` goes through the OpenAI SDK) repeats a request once on a new connection after
  ``httpx.ConnectError``/``RemoteProtocolError``, whatever ``num_retries`` says. One ``reset``
  therefore costs two requests (the second draws the next fault) and raises nothing; two in a
  row raise ``InternalServerError`` (500, "[Errno 104] Connection reset by peer").
- ``stop_reason: "max_tokens"`` -> ``finish_reason == "length"`` ->
  ``IncompleteOutputException``, not re-asked. ``refusal`` -> ``finish_reason ==
  "content_filter"`` with the text as ``content``; ``empty`` -> ``content`` None; both, and
  ``malformed_json`` (a text block instead of ``tool_use``), fail ``TOOLS`` parsing with
  ``ResponseParsingError("No tool calls ...")`` and the JSON modes with a
  ``pydantic.ValidationError``, and are re-asked like on the OpenAI wire; ``invalid`` is
  re-asked on its validation error.

How the client stack reacts: Gemini
-----------------------------------
Calling ``model="gemini/gemini-2.5-flash"`` (in the cost map) or ``"gemini/gemini-1.5-flash"``
(not in it), ``api_base=srv.gemini_base_url``:

- litellm posts to ``{api_base}/models/{model}:generateContent`` with the key in an
  ``x-goog-api-key`` header (never in the URL), so the base is ``http://127.0.0.1:PORT/v1beta``
  (as Google's is ``https://generativelanguage.googleapis.com/v1beta``). It uses
  ``:streamGenerateContent?alt=sse`` only for ``stream=True``, which the stand-in does not
  serve (a 404). Body: ``contents`` (the system prompt as ``system_instruction``, or folded into
  the first user turn for a model the cost map lacks), ``tools: [{"function_declarations"}]``,
  ``toolConfig``, ``generationConfig`` in snake case (``response_mime_type``...).
- All four modes round-trip. ``TOOLS``: ``toolConfig: {"functionCallingConfig": {"mode":
  "ANY", "allowed_function_names": [<Model>]}}``, answered by ``functionCall``. litellm rewrites
  the parameters into Google's dialect and drops every ``enum`` on a non-string type (Gemini's
  enums are strings): an index typed ``Literal[1, 2, 3]`` arrives as a bare integer, nothing but
  the prompt keeps it in range, and the stand-in's schema-valid answer (0) fails validation.
  ``JSON_SCHEMA``: ``response_mime_type: application/json`` with ``response_json_schema`` (JSON
  Schema, enums kept) for a model the map says supports it; otherwise the schema is appended to
  the prompt as a Python ``repr`` after "Use this JSON schema:" (enums dropped as above).
  ``JSON``: ``response_mime_type`` and the schema in the system text; ``MD_JSON``: the schema in
  the system text, a fenced answer. Usage from ``usageMetadata`` equals the ledger's;
  ``response_cost`` is filled in for ``gemini/gemini-2.5-flash`` (``stats().cost(
  "gemini/gemini-2.5-flash")``).
- ``extra_body`` is merged into the body: an unknown name there is Google's 400 ->
  ``litellm.BadRequestError``.
- Errors: a wrong key (400 ``API_KEY_INVALID``) -> ``AuthenticationError`` (``status_code ==
  401``; litellm matches "API key not valid"); other 400s -> ``BadRequestError``; 404 ->
  ``NotFoundError``; 429 -> ``RateLimitError`` (``litellm_response_headers["retry-after"]``, and
  ``"retryDelay": "7s"`` in the message); 500 -> ``InternalServerError``; 502 ->
  ``APIConnectionError`` (``status_code == 500``); 503 with Google's "The model is overloaded."
  -> ``InternalServerError`` (500): use the message, not the class, to tell them apart; client
  timeout -> ``Timeout`` (408). litellm refuses to send a Gemini request without a key, so the
  403 is reachable from raw HTTP only.
- Resets as on the Anthropic wire: one is sent again silently; two raise
  ``APIConnectionError`` (500, "Connection reset by peer").
- ``MAX_TOKENS`` -> ``finish_reason == "length"`` -> ``IncompleteOutputException``. ``SAFETY``
  (the ``refusal`` fault) -> ``finish_reason == "content_filter"``, ``content`` None; ``empty``
  -> ``content`` None; with ``malformed_json`` (a text part instead of ``functionCall``) these
  fail parsing and are re-asked as on the Anthropic wire.
"""

from __future__ import annotations

from standins.openai_server.anthropic_wire import (
    ANTHROPIC_BETA_MESSAGE_PARAMS,
    ANTHROPIC_MESSAGE_PARAMS,
)
from standins.openai_server.cli import main
from standins.openai_server.gemini_wire import (
    GEMINI_GENERATION_CONFIG_FIELDS,
    GEMINI_REQUEST_FIELDS,
)
from standins.openai_server.ledger import StandInStats, WireFamily
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
    "ANTHROPIC_BETA_MESSAGE_PARAMS",
    "ANTHROPIC_MESSAGE_PARAMS",
    "FAULT_KINDS",
    "GEMINI_GENERATION_CONFIG_FIELDS",
    "GEMINI_REQUEST_FIELDS",
    "OPENAI_PROMPT_CACHE",
    "FaultKind",
    "FaultPlan",
    "Handler",
    "OpenAIStandIn",
    "Reply",
    "ReplyLike",
    "StandInStats",
    "ToolCall",
    "WireFamily",
    "main",
    "openai_chat_params",
]
