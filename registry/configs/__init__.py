"""Checkpoint configs: a Hugging Face config.json's quantization_config (Quark, compressed-tensors,
AutoRound, gpt-oss `quant_method: "mxfp4"`) read with a line for every value (json_lines), into
one reading per layer group (hf_reading, hf_quark, hf_compressed, hf_autoround, hf_gptoss), which
layer group claims which module (hf_claims), and each group mapped to a catalog scheme
(hf_matching: exact contracts, stored-weight scales, short refusals; hf_config:
`schemes_from_config`). No torch.

Applying a config to a model is registry/nn/quantize_config.py.
"""
