"""Measuring a pair on this machine. May import engine.deploy and everything below it.

generate       one generation through the engine worker, from its events to its summary
server_engine  the engine API on llama-server: streamed steps cut back into verify steps, restarts on a setting
server_worker  the engine worker that measures through llama-server (``python -m engine.measure.server_worker``)
live           what a live view shows of a running session, in fixed-size rings
baseline       a baseline and what it measured, so no figure divides by another pair's speed
why            why a live run is as fast as it is: a step's measured parts against a plain token
candidates     every speculative setting SpecTune measures on a pair, in one place
quick_check    a short measured check of which speculative setting pays on the loaded pair
tuner          the auto-tuner: the cost model proposes, real runs decide
concurrent_tune  the tune at N clients: llama-server at -np N, each setting paired with no speculation
validate       the exported llama-server command run for real and held against the lab
forward_times  forward-pass times by batch size, timed in alternating rounds
device_probe   timing this CPU's llama.cpp forward passes for the speed model (once, cached)
pair_speed     how fast a pair of GGUF files is predicted to run here, before it is loaded
calibration    the newest tune of a pair in the history, as the speed model's measurement
history        every run, validation and tune, kept in SQLite
demo           ``spectune demo``: the app's main job, headless, on the bundled demo pair
"""
