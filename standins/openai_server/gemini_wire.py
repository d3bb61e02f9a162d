"""Google's Gemini API (``models/{model}:generateContent``) as the stand-in speaks it.

The request side: the documented fields of ``GenerateContentRequest`` and of its
``generationConfig`` (:data:`GEMINI_REQUEST_FIELDS`, :data:`GEMINI_GENERATION_CONFIG_FIELDS`),
the checks a body must pass (:func:`gemini_problem`) and what answer it expects
(:func:`gemini_shape`). The answer side: the ``GenerateContentResponse`` that carries a
:class:`~standins.openai_server.wire.Reply` (:func:`gemini_response`) and Google's error body
(:func:`gemini_error`). Nothing here runs a server.

Google's JSON parser takes every field under its proto name (``system_instruction``) and its
JSON name (``systemInstruction``); litellm mixes both (``system_instruction``, ``toolConfig``,
``function_declarations``, ``response_mime_type``), so every check here does too.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Mapping
from typing import Any

from standins.openai_server.wire import Reply, Shape, json_object, text_shape

GEMINI_API_VERSIONS = ("v1beta", "v1", "v1alpha")
"""The API versions the stand-in serves ``models/{model}:generateContent`` under (litellm's
Google AI Studio URL uses ``v1beta``, ``v1alpha`` for Gemini 3)."""

GEMINI_REQUEST_FIELDS = frozenset({
    "model", "contents", "tools", "toolConfig", "safetySettings", "systemInstruction",
    "generationConfig", "cachedContent", "serviceTier",
})  # fmt: skip
"""The fields of Google AI Studio's ``GenerateContentRequest`` (JSON names). Vertex AI's
``labels`` and ``modelArmorConfig`` are not among them: the Gemini API refuses them."""

GEMINI_GENERATION_CONFIG_FIELDS = frozenset({
    "stopSequences", "responseMimeType", "responseSchema", "responseJsonSchema",
    "responseModalities", "candidateCount", "maxOutputTokens", "temperature", "topP", "topK",
    "seed", "presencePenalty", "frequencyPenalty", "responseLogprobs", "logprobs",
    "enableEnhancedCivicAnswers", "speechConfig", "thinkingConfig", "imageConfig",
    "mediaResolution",
})  # fmt: skip
"""The fields of the Gemini API's ``GenerationConfig`` (JSON names)."""

STATUSES: Mapping[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
"""google.rpc canonical status names per HTTP status, as Google's error bodies carry them."""

SERVER_ERROR_MESSAGES: Mapping[int, str] = {
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
    504: "Deadline expired before operation could complete.",
}
"""What the Gemini API says with a 5xx (other statuses get a generic stand-in message)."""

API_KEY_INVALID = "API key not valid. Please pass a valid API key."
"""The message of the Gemini API's answer to a wrong key (HTTP 400, reason API_KEY_INVALID)."""

NO_API_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
"""The message of the Gemini API's answer to a request without a key (HTTP 403)."""

_SNAKE = re.compile(r"_([a-z0-9])")


def json_name(name: str) -> str:
    """The JSON (lowerCamelCase) name of a field given by its proto or JSON name."""
    return _SNAKE.sub(lambda match: match.group(1).upper(), name.lstrip("_"))


def field(body: Any, name: str) -> Any:
    """A field of ``body`` under either of its names (``name`` is the JSON name), else None."""
    if not isinstance(body, Mapping):
        return None
    for key, value in body.items():
        if json_name(str(key)) == name:
            return value
    return None


def gemini_error(
    status: int, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Google's error body: ``{"error": {"code", "message", "status"[, "details"]}}``."""
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": STATUSES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def unknown_field_message(name: str, at: str | None = None) -> str:
    """Google's message for a field its parser does not know (``at``: the enclosing field)."""
    where = f" at '{at}'" if at else ""
    return f'Invalid JSON payload received. Unknown name "{name}"{where}: Cannot find field.'


def gemini_problem(body: Any, *, strict: bool) -> str | None:
    """The 400 message for a body the Gemini API would refuse, or None when it is usable.

    Args:
        body: The parsed request body.
        strict: Refuse fields ``GenerateContentRequest`` and ``GenerationConfig`` do not have.
    """
    if not isinstance(body, Mapping):
        return "Invalid JSON payload received. Expected an object."
    if strict:
        unknown = [
            unknown_field_message(str(name))
            for name in body
            if json_name(str(name)) not in GEMINI_REQUEST_FIELDS
        ]
        config = field(body, "generationConfig")
        if isinstance(config, Mapping):
            unknown += [
                unknown_field_message(str(name), "generation_config")
                for name in config
                if json_name(str(name)) not in GEMINI_GENERATION_CONFIG_FIELDS
            ]
        if unknown:
            # Google lists every unknown name, one per line.
            return "\n".join(unknown)
    contents = field(body, "contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified\n"
    for index, content in enumerate(contents):
        if not isinstance(content, Mapping) or not isinstance(content.get("parts"), list):
            return (
                f"* GenerateContentRequest.contents[{index}].parts: contents.parts must "
                "not be empty.\n"
            )
        if content.get("role") not in (None, "user", "model", "function", "tool"):
            return "Please use a valid role: user, model."
    return None


def _declarations(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for tool in field(body, "tools") or []:
        if isinstance(tool, Mapping):
            declared = field(tool, "functionDeclarations") or []
            found += [d for d in declared if isinstance(d, Mapping)]
    return found


def _parts_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return "\n".join(
        str(part["text"])
        for part in parts or []
        if isinstance(part, Mapping) and isinstance(part.get("text"), str)
    )


def gemini_chat_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as OpenAI-shaped messages, for the default answers, faults and token counts.

    ``systemInstruction`` becomes a leading system message, ``model`` turns assistant ones;
    the function declarations and the response schema stand where an OpenAI request carries
    ``tools`` and ``response_format``.
    """
    messages: list[dict[str, Any]] = []
    system = _parts_text(field(body, "systemInstruction"))
    if system:
        messages.append({"role": "system", "content": system})
    for content in field(body, "contents") or []:
        role = "assistant" if content.get("role") == "model" else "user"
        messages.append({"role": role, "content": _parts_text(content)})
    view: dict[str, Any] = {"messages": messages}
    if field(body, "tools"):
        view["tools"] = field(body, "tools")
    schema = _response_schema(body)
    if schema is not None:
        view["response_format"] = schema
    return view


def _response_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of ``generationConfig``: ``responseJsonSchema``, else ``responseSchema``."""
    config = field(body, "generationConfig")
    if not isinstance(config, Mapping):
        return None
    json_schema = field(config, "responseJsonSchema")
    if isinstance(json_schema, Mapping):
        return dict(json_schema)
    openapi = field(config, "responseSchema")
    if isinstance(openapi, Mapping):
        return openapi_to_json_schema(openapi)
    return None


def openapi_to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Gemini's OpenAPI-subset ``Schema`` as JSON Schema (``OBJECT`` -> ``object``...).

    Only the spelling differs for what :func:`~standins.schemas.schema_instance` reads: type
    names are upper case in Google's dialect, ``nullable`` and ``propertyOrdering`` need no
    translation (an instance never needs a null, and key order is free).
    """
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            converted[key] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, Mapping):
            converted[key] = {
                name: openapi_to_json_schema(sub) if isinstance(sub, Mapping) else sub
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            converted[key] = openapi_to_json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            converted[key] = [
                openapi_to_json_schema(sub) if isinstance(sub, Mapping) else sub for sub in value
            ]
        else:
            converted[key] = value
    return converted


def gemini_shape(body: Mapping[str, Any], view: Mapping[str, Any]) -> Shape:
    """What kind of answer a (valid) request expects, and the schema it must follow.

    A ``functionCall`` part when ``toolConfig.functionCallingConfig.mode`` is ``ANY`` (the first
    of ``allowedFunctionNames``, else the first declaration); JSON text when
    ``generationConfig.responseMimeType`` is ``application/json`` (an instance of the response
    schema, else of the schema the prompt embeds, else ``{}``); otherwise text, as on the
    Anthropic wire (:func:`~standins.openai_server.wire.text_shape`).
    """
    declarations = _declarations(body)
    calling = field(field(body, "toolConfig"), "functionCallingConfig")
    if declarations and str(field(calling, "mode") or "AUTO").upper() == "ANY":
        allowed = field(calling, "allowedFunctionNames") or []
        chosen = next(
            (d for name in allowed for d in declarations if d.get("name") == name),
            declarations[0],
        )
        return Shape(mode="tools", schema=_parameters(chosen), tool_name=str(chosen.get("name")))
    config = field(body, "generationConfig")
    mime = field(config, "responseMimeType") if isinstance(config, Mapping) else None
    if mime == "application/json":
        schema = _response_schema(body)
        if schema is not None:
            return Shape(mode="json_schema", schema=schema)
        embedded = text_shape(view).schema or litellm_prompt_schema(view)
        return Shape(mode="json_object", schema=embedded or {})
    return text_shape(view)


def _parameters(declaration: Mapping[str, Any]) -> dict[str, Any]:
    json_schema = field(declaration, "parametersJsonSchema")
    if isinstance(json_schema, Mapping):
        return dict(json_schema)
    parameters = declaration.get("parameters")
    return openapi_to_json_schema(parameters) if isinstance(parameters, Mapping) else {}


_LITELLM_PROMPT = re.compile(r"Use this JSON schema:\s*```json\s*(\{.*?\})\s*```", re.DOTALL)


def litellm_prompt_schema(view: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema litellm writes into the prompt for a model it thinks has no response schema.

    litellm (``response_format`` json_schema, e.g. instructor's ``JSON_SCHEMA`` mode, on a
    Gemini model its cost map does not list) appends ``Use this JSON schema: ```json {...}```
    `` to the last user message, the schema as a Python ``repr`` (single quotes, ``True``).
    """
    for message in reversed(view["messages"]):
        found = _LITELLM_PROMPT.search(str(message.get("content", "")))
        if found is None:
            continue
        try:
            value = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, dict) else None
    return None


def gemini_response(
    reply: Reply, model: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The ``GenerateContentResponse`` that carries ``reply`` (see :mod:`standins.openai_server`).

    A structured refusal (``reply.refusal`` without content) is a candidate stopped for
    ``SAFETY``, with no content, as Gemini blocks a response.
    """
    candidate: dict[str, Any] = {"index": 0}
    if reply.refusal is not None and reply.content is None and not reply.tool_calls:
        candidate["finishReason"] = "SAFETY"
        candidate["safetyRatings"] = [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
        ]
    else:
        parts: list[dict[str, Any]] = []
        if reply.content is not None or not reply.tool_calls:
            parts.append({"text": reply.content or ""})
        for call in reply.tool_calls:
            arguments = json_object(call.arguments)
            if arguments is None:
                # functionCall.args is a parsed object on this wire too: arguments that are no
                # JSON object (malformed, truncated) read as the model answering in prose.
                parts.append({"text": call.arguments})
            else:
                parts.append({"functionCall": {"name": call.name, "args": arguments}})
        candidate["content"] = {"parts": parts, "role": "model"}
        candidate["finishReason"] = "MAX_TOKENS" if reply.finish_reason == "length" else "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": completion_tokens,
            "totalTokenCount": prompt_tokens + completion_tokens,
        },
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:22],
    }
