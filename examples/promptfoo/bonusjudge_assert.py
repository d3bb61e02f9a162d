"""The promptfoo assertion of promptfooconfig.yaml: bonusjudge's, from the light client.

promptfoo calls ``get_assert(output, context)`` with the test's ``vars`` and the assertion's
``config`` in ``context``; see ``bonusjudge_client.promptfoo`` for what it returns.
"""

from bonusjudge_client.promptfoo import get_assert

__all__ = ["get_assert"]
