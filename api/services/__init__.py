"""The service layer: what the HTTP routes do, without HTTP.

A route parses its request (body, query, path, the caller's identity), calls one function here,
and returns what it gets; the functions take plain values and the app's objects (the grader, the
job manager, the settings) and raise the service's errors (``api.errors``), which the app turns
into responses. Services never import routes.

``judges``       the per-request judge selection (allow-list, overrides, a judge configured).
``grading``      grading one item or a batch, and bonus-point extraction.
``jobs``         submitting and listing grading jobs (the job machinery is ``api.jobs``).
``mcq``          multiple-choice scoring: one call, and the ``mcq`` job kind.
``calibration``  calibration runs: the ``calibrate`` job kind and its runner.
``reports``      the report folders calibration runs write.
``metrics``      ROUGE-L and BERTScore of pairs.
``health``       the readiness checks.
``rubrics``      the rubric library as the service shows it.
"""
