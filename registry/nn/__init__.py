"""Model integration (imports torch): MXLinear and MXGroupedExperts (layers), quantize_model
and plan_quantization (quantize, with layer_patterns), quantize_model_from_config
(quantize_config), save_quantized / load_quantized (checkpoint, with checkpoint_file).

Nothing is imported here; the public names are `registry.quantize_model` etc. (lazy).
"""
