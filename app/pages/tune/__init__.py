"""The Tune page.

page    TunePage: inputs, progress, the ranked result and the way back to the Lab
runner  the TuneRunner thread: one auto-tune against an engine worker of its own
"""
