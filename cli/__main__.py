"""``python -m cli``: the ``bonusjudge`` command without the console script."""

from cli.main import main

raise SystemExit(main())
