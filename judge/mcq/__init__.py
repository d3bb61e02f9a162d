"""Multiple-choice scoring for the Theory-of-Mind suites (ToMBench, CogToM, XToM, ToMValley).

The modules, each imported where it is used (this package file imports nothing, so
``bonusjudge mcq --help`` loads none of them):

``extract``   the chosen option read from free text (``extract_answer``: strict, lenient, fuzzy).
``score``     one item scored (``score_item``) and a run summarised with the papers' breakdowns
              (``summarize``, ``compute_metrics``, ``multi_label_f1``).
``permute``   permuted presentations against position bias (``expand_item``,
              ``plan_permutations``, ``to_canonical`` / ``to_displayed``).
``runner``    whole JSONL files and item lists (``score_file``, ``score_file_async``,
              ``score_items``).
``llm``       the LLM fallback extractor, on the engine's judge (cached, retried).

The item, result and summary models are the wire contract's (:mod:`bonusjudge_client.wire.mcq`,
defaults in :mod:`bonusjudge_client.wire.mcq_defaults`). The CLI subcommand lives in
:mod:`cli.mcq`.
"""
