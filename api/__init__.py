"""The bonusjudge HTTP service (FastAPI) and its client.

``api.app.create_app`` builds the service on the grading engine (``judge.engine.Grader``);
``api.serve.serve`` runs it under uvicorn; ``api.client`` talks to it. This package file imports
nothing, so ``api.client`` stays importable on machines without FastAPI.
"""
