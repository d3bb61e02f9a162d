"""Benchmarks of bonusjudge: scripts that print tables (never timed tests).

Run them all with ``.venv/bin/python -m bench.run_all``; see ``bench/README.md``.
"""
