"""``python -m engine.cli``: the same as the ``spectune`` command."""

from engine.cli.main import main

raise SystemExit(main())
