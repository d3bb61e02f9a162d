"""Run the stand-in from the command line: ``python -m judge.testing.openai_server -h``."""

import sys

from judge.testing.openai_server.cli import main

sys.exit(main())
