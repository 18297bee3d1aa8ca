"""The JSON Schema of a scheme file, for editors and CI (`registry schema`).

The file models' shapes (registry.files.schema) plus every lint rule on one file that JSON Schema
can express (registry.lint.schema_rules): it lives with lint because it carries lint's rules
(the summary length, the keys that pass the kernel checks), so scheme files never import lint.
"""
from __future__ import annotations

from registry.files.schema import SchemeFile
from registry.lint.checks import SUMMARY_WARN_LEN
from registry.lint.schema_rules import lint_keys, role_rules, scale_rules, tensor_rules

# A summary with something printed, and no line break once its ends are stripped.
SUMMARY_PATTERN = r"^\s*\S(?:[^\n]*\S)?\s*$"


def json_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a scheme file, for editors and CI: the file models'
    shapes plus every lint rule on one file that JSON Schema can express
    (registry.lint.schema_rules), so that a file it accepts passes `registry lint` too."""
    schema = SchemeFile.model_json_schema()
    defs, props = schema["$defs"], schema["properties"]
    defs["ScaleSpec"]["allOf"] = scale_rules()
    defs["TensorSpec"]["allOf"] = tensor_rules()
    weights, activations = lint_keys()
    for role, keys in (("weight", weights), ("activation", activations)):
        defs[f"{role.title()}Key"] = {
            "title": role, "description": f"`{role}:`, holding a key that lint accepts",
            "allOf": [{"$ref": "#/$defs/TensorSpec"}, *role_rules(keys, role)]}
    props["weight"] = {"$ref": "#/$defs/WeightKey"}
    # if / then / else, not oneOf: a validator then names the field at fault, not the branch
    activation = props["activation"]
    del activation["oneOf"]
    activation.update({"if": {"type": "string"},
                       "then": {"const": "none"} if None in activations else False,
                       "else": {"$ref": "#/$defs/ActivationKey"}})
    props["summary"].update(
        pattern=SUMMARY_PATTERN, maxLength=SUMMARY_WARN_LEN,
        description=f"one line saying what the scheme is (lint warns above {SUMMARY_WARN_LEN} "
                    "characters)")
    props["aliases"]["uniqueItems"] = True
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://ocp-mx-registry/scheme.schema.json", **schema}
