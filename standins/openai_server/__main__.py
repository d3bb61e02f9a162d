"""Run the stand-in from the command line: ``python -m standins.openai_server -h``."""

import sys

from standins.openai_server.cli import main

sys.exit(main())
