"""``StartStop``: what every server a test, a benchmark or a demo runs shares.

It ships with the stand-in judge (:class:`standins.openai_server.runner.LoopbackServer` is one);
the test tree's launchers (``tests/helpers``: ``bonusjudge serve``, Redis, PostgreSQL) build on
it too, so there is one start-and-stop protocol, not one per launcher.
"""

from __future__ import annotations

from typing import Self

__all__ = ["StartStop"]


class StartStop:
    """``with x:`` starts ``x`` and stops it on the way out, whatever happened inside.

    For the servers and processes that tests and benchmarks run (the stand-in judge, ``bonusjudge
    serve``): each defines ``start`` (returning itself, once it answers) and ``stop``.
    """

    def start(self) -> Self:
        """Start, and return once ready."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop (a no-op when not running)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
