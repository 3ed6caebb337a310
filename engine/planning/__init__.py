"""What will run here, and how well: the hardware (NVML and the CPU), the memory plan of a pair, the
fit verdict and preflight check, recommendations from the catalog, and the speculative cost model.

May import engine.runtime, engine.llama, engine.models and engine.core.
"""
