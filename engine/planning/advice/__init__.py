"""What to run: choices ranked by predicted speed among those that fit, and the verdict before a load.

recommend        the ranking: target/draft/quantization choices that fit a memory budget, for this machine or a size
choice           a ranked choice and what it says: its reasons, score, JSON and how to download it
presets          the catalog's model-pair presets held against a memory budget
placement        where the models go when the GPUs cannot simply hold both
preflight        can this pair load here, and why not: one verdict with its reasons
catalog_models   the catalog's models as the planner sees them: ModelInfo, costs and plans from their numbers
model_numbers    a model from its numbers, without a file: the tensors and keys llama.cpp would find
named_models     a model named without its file: a preset, a catalog file, ARCH:SIZE:QUANT
"""
