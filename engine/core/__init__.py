"""The foundation every layer shares. Imports nothing else from engine.

settings   the knobs of a run, their llama.cpp defaults and their validation
stats      RunStats, the one counter of what a run did
workloads  the workload prompt sets a run or a sweep goes through
chat       conversations: prompts in the OpenAI chat format
paired     paired comparisons: the median of paired ratios with an interval, ABBA orders
tune_record  a tune's result as the history keeps it (TuneRecord), for the tuner and every reader of it
units      bytes as SpecTune writes them: GiB and MiB at the precision each figure needs
paths      where SpecTune's own files are: the source tree, its resources, the user's data and cache
child_call  a function of the engine computed in a child process (the app's ranking and header parses, off
            the GUI process's GIL); it names the module it runs there rather than importing it here
"""
