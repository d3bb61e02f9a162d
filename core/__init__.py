"""The leaf every layer stands on: the error tree and the language-aware text helpers.

``core`` imports nothing from the project (an import-linter contract holds it to that), so the
rubric loader, the engine, calibration, the service and the command line can all raise the same
errors and count words the same way without importing one another upwards.
"""
