"""How fast a pair will run on a device, before it runs, and how far that prediction may be off.

cost_model       speculative tokens/s from step costs: the one formula the why line and the predictions share
model_cost       what one token costs a model, from its GGUF header: bytes and multiply-adds by weight class
device_speed     what a device sustains for llama.cpp (DeviceSpeed), and the CPU probe's solve
gpu_speed        llama.cpp's CUDA kernels on a GPU: the model's form and its constants fitted to published runs
gpu_table        NVIDIA cards by name (resources/catalog/gpus.json), forgiving matching, machines described
speed_model      how fast a pair will run here: a model's cost on a device, and the acceptance priors
prediction_band  how far a speed prediction may be off: bands from held-out errors
"""
