"""uvicorn's h11 protocol, answering a request it cannot parse in the service's error shape.

A request h11 refuses (a negative or non-numeric ``Content-Length``, a malformed request line or
header, headers past ``MAX_HEADER_BYTES``) never reaches the app: uvicorn answers it on the spot
with a plain-text 400, ``Invalid HTTP request received.``, and closes the connection. Every other
error of the service is ``{"error": {"type", "message", "field"}}`` (``api.errors``), and a client
that parses that shape failed on this one. uvicorn takes the protocol class as its ``http``
option (``uvicorn.Config(http=...)``, as a class or an import string), so this subclass of its
h11 protocol answers such a request with the same shape, ``400 bad_request``; parsing, limits and
everything else stay uvicorn's. The message says what kind of thing was wrong, not h11's text,
which can quote the request's bytes.

Imported by uvicorn from ``api.serve.uvicorn_options`` (an import string), so ``api.serve``
itself does not import uvicorn before it starts serving.
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from bonusjudge_client.wire.schemas import ErrorBody, ErrorInfo

INVALID_REQUEST_MESSAGE = (
    "invalid HTTP request: the request line or a header could not be parsed (e.g. a negative "
    "or non-numeric Content-Length, or headers too large)"
)
"""The message of the 400 answered to a request the HTTP parser refuses."""

INVALID_REQUEST_BODY = ErrorBody(
    error=ErrorInfo(type="bad_request", message=INVALID_REQUEST_MESSAGE, field=None)
).model_dump_json().encode("ascii")
"""The whole answer's body, built once: ``{"error": {"type": "bad_request", ...}}``."""


class ErrorShapeH11Protocol(H11Protocol):
    """uvicorn's h11 protocol whose 400 for an unparsable request is the service's error body."""

    def send_400_response(self, msg: str) -> None:
        """Answer 400 with the error shape and close the connection (as uvicorn does).

        Args:
            msg: uvicorn's plain-text message; uvicorn has already logged it.
        """
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(INVALID_REQUEST_BODY)).encode("ascii")),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=INVALID_REQUEST_BODY),
            h11.EndOfMessage(),
        ):
            output = self.conn.send(event)
            if output:
                self.transport.write(output)
        self.transport.close()
