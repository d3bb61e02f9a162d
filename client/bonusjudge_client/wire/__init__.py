"""The contract both sides of the HTTP API share: the wire format, its models and vocabulary.

The service validates requests and builds answers with these models, the engine grades with them,
and the client sends and reads them, so there is one definition of the contract and no copy to
drift. This package holds the wire format only (what goes over HTTP); the helpers both sides also
share, the retry arithmetic and the one-line validation errors, are modules of the client package
(``bonusjudge_client.backoff``, ``bonusjudge_client.validation``). Modules here import pydantic
and each other only (never httpx, never the engine):

``vocab``         languages, metric names, unscored reasons.
``options``       comma lists, CharToM windows, ``JudgeOverrides`` (a request's judge selection).
``scores``        ``RougeScore`` and ``BertScore``.
``grading``       ``GradeRequest`` and ``GradeResult`` with their parts; ``ExtractRequest/Result``.
``summary``       ``Summary``: BPC, penalty rate and the means, overall and by group.
``mcq``           the multiple-choice scorer's item, result and summary.
``mcq_defaults``  the answer extraction's default thresholds.
``schemas``       the service's bodies, batch and job answers, and the one error shape.
``usage``         the answer of ``GET /v1/usage``: what one API key has used.
``chartom``       how a CharToM-QA line reads as a request: its keys and plot windows.
``base``          ``WireModel``, every model's base: validators built on first use;
                  ``StrictWireModel``, the frozen ones that refuse unknown fields.
"""
