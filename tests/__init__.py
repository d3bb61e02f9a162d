"""bonusjudge's tests: a package so that the tests, ``bench/`` and ``scripts/`` import one set of
helpers (:mod:`tests.helpers`). It is not shipped: the wheel and the image hold only what
pyproject.toml's package list and the Dockerfile name.
"""
