"""The ``bonusjudge`` command line, the top layer: it may import every other package.

``cli.main`` builds the parser and runs a subcommand; each subcommand lives in its own module
(``grade``, ``serve``, ``calibrate``, ``mcq``) and ``cli.common`` holds what they share, the
judge options above all, derived from the configuration models of ``judge.config``.
"""

import os

# Set before anything imports litellm or transformers (they read these once, at import): the
# command line runs offline by default and keeps library chatter off the terminal.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm's Anthropic adapter otherwise fetches its table of beta headers on the first call.
os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
