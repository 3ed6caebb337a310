"""The foundation every layer shares: the knobs and their validation (settings), the one run counter
(stats), the workload prompt sets (workloads) and where SpecTune's files live (paths).

Imports nothing else from engine.
"""
