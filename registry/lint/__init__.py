"""Lint: checks over a loaded catalog (checks: LINT_CHECKS, run_lint), the checks that read the
kernel table (kernel_checks), and the JSON Schema of a scheme file, which carries every lint
rule JSON Schema can express (json_schema, schema_rules). `registry lint --probe` runs kernels:
that is registry/machine/probe.py.

Reads registry.files and kernels.select (data only); no torch, no triton.
"""
