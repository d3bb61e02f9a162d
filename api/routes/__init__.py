"""The service's routers, one per resource: grading, jobs, metrics, rubrics, health.

``common`` holds what several routers share (a guarded ``/v1`` router, a job's results stream).
"""
