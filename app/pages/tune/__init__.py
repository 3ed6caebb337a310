"""The Tune page.

page    TunePage: inputs, progress, the ranked result and the way back to the Lab
runner  TuneThread, what the page sees of a tune; TuneRunner: one auto-tune against an engine worker of its own
concurrent_runner  the tune at several clients at once, through llama-server (engine.measure.concurrent_tune)
"""
