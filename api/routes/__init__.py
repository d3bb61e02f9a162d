"""The service's routers, one per resource: grading, jobs, metrics, rubrics, health."""
