"""What will run here, and how well. May import engine.runtime, engine.llama, engine.models and engine.core.

Three concerns, each a subpackage, layered so that advice reads speed and memory, and speed reads memory:

memory/     how much memory a pair takes, and the one rule for whether it fits a budget
speed/      how fast a pair runs on a device: the cost model, device speeds, GPU fit, bands
advice/     what to run: ranked choices, presets, placement, the pre-load verdict, catalog models
hardware    what the machine has: NVIDIA GPUs through NVML, the CPU and RAM (read by all three)
constants   the numbers several parts must agree on, each once with its reason
"""
