"""Providers: what sends a judge call and returns the judge's answer.

* :mod:`judge.providers.base`: the ``Provider`` protocol, ``Completion``, and the helpers both
  transports share (error mapping, Retry-After, unusable-answer reasons, the preflight probe);
* :mod:`judge.providers.litellm`: any litellm model through instructor;
* :mod:`judge.providers.wire` and :mod:`judge.providers.direct`: the OpenAI wire format and the
  direct HTTP transport that speaks it;
* :mod:`judge.providers.routing`: which transport carries a call (``RoutingProvider``) and the
  start-up preflight;
* :mod:`judge.providers.fake`: ``FakeProvider``, the scripted judge shipped for tests;
* :mod:`judge.providers.local_llm`: a local llama.cpp server started for the service.
"""
