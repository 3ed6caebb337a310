"""What will run here, and how well. May import engine.runtime, engine.llama, engine.models and engine.core.

hardware         what the machine has: NVIDIA GPUs through NVML, the CPU and RAM
model_numbers    a model from its numbers, without a file: the tensors and keys llama.cpp would find
memory_plan      the memory a target and draft take, per device and buffer, before they load
kv_layers        which layers keep a KV cache, and how wide its rows are
sliding_window   sliding-window attention layers and how many KV cells they keep
recurrent        hybrid models' layers that keep a recurrent state instead of a KV cache
compute_buffer   llama.cpp's reserved compute buffer, as empirical fits
budget           the memory a plan is held against (one Budget type), and the headroom a recommendation keeps
fit              the memory plan of both models held against the free memory
placement        where the models go when the GPUs cannot simply hold both
preflight        can this pair load here, and why not: one verdict with its reasons
catalog_models   the catalog's models as the planner sees them: ModelInfo, costs and plans from their numbers
recommend        ranked target/draft/quantization choices that fit a memory budget, for this machine or a size
presets          the catalog's model-pair presets held against a memory budget
cost_model       speculative tokens/s from measured step costs
model_cost       what one token costs a model, from its GGUF header: bytes and multiply-adds by weight class
device_speed     what a device sustains for llama.cpp (DeviceSpeed), and the CPU probe's solve
gpu_speed        llama.cpp's CUDA kernels on a GPU: the model's form and its constants fitted to published runs
gpu_table        NVIDIA cards by name (resources/catalog/gpus.json), forgiving matching, machines described
named_models     a model named without its file: a preset, a catalog file, ARCH:SIZE:QUANT
speed_model      how fast a pair will run here: a model's cost on a device, and the acceptance priors
constants        the numbers several parts must agree on, each once with its reason
prediction_band  how far a speed prediction may be off: bands from held-out errors
"""
