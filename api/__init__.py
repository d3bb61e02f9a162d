"""The bonusjudge HTTP service (FastAPI) and its client.

``api.app.create_app`` builds the service on the grading engine (``judge.engine.Grader``);
``api.serve.serve`` runs it under uvicorn. Its client, ``bonusjudge_client``, is a distribution
of its own at the root of the repository (``client/``), below everything here. This package file
imports nothing.
"""
