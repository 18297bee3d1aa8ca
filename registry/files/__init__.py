"""Scheme files: YAML with lines (yaml_lines), the file model (schema), the loader that turns a
file into a Scheme with a line for every field (loader), names and aliases across directories
(names), and the catalog every look-up reads (catalog).

Imports pydantic and PyYAML, and kernels.spec (the vocabulary); no torch, no triton, no lint.
Nothing is imported here: `import registry.files.catalog` reads only what it needs.
"""
