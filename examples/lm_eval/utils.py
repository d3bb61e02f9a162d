"""The bonusjudge scorer of chartom_bonusjudge.yaml, from the light client.

``process_results`` grades each generation through the service of ``BONUSJUDGE_URL``; for another
judge or plot window, build one: ``process_results = make_process_results(judge={"model":
"openai/gpt-4o"}, context_window=2000)``.
"""

from bonusjudge_client.lm_eval import bpc, penalty_rate, process_results, unscored

__all__ = ["bpc", "penalty_rate", "process_results", "unscored"]
