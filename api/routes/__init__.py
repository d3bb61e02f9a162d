"""The service's routers, one per resource: grading, jobs, metrics, rubrics, health.

``common`` holds what the routers of several job kinds share (a job's results stream).
"""
