"""Scheme-file texts several tests write (one copy)."""

#: A scheme whose activation key (fp8, dynamic per-token) the QDQ dispatcher has no kernel for.
BAD_ACT = """\
name: w_mxfp4_a_fp8_token
summary: MXFP4 weights, fp8 activations with dynamic per-token scales
aliases: []
weight:     {format: mxfp4, scale: {format: e8m0, block: 32, rounding: even}, static: true}
activation: {format: fp8_e4m3, scale: {format: fp32, granularity: token}, static: false}
"""
