"""``python -m engine.synthetic OUT [options]``: the test-model generator's command line.

The generator lives in engine.models.synthetic; this short name is the one the docs and
the issue checks use.
"""

from engine.models.synthetic import main

if __name__ == "__main__":
    raise SystemExit(main())
