"""Read gpt-oss's `quantization_config` (quant_method: "mxfp4", transformers' Mxfp4Config).

The config holds only `quant_method` and `modules_to_not_convert`; the rest is fixed by the
format (transformers/integrations/mxfp4.py): every GptOssMLP's `experts` (gate_up_proj and
down_proj, stored as `*_blocks` uint8 E2M1 pairs and `*_scales` uint8 e8m0 per 32) is MXFP4,
activations stay bf16; nothing else is quantized. A `modules_to_not_convert` pattern keeps an
experts module in bf16 by transformers' `should_convert_module` rule: `re.match` from the start
up to a module boundary, or a plain suffix. The experts map to the weight-only MXFP4 scheme
(`w_mxfp4`); the producer's scale rounding is not written anywhere, and loading never re-rounds
stored scales (hf_matching's stored weights). No torch.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from registry.configs.hf_reading import (ConfigReading, GroupReading, SpecBuilder, dump,
                                         field_path, key_path)
from registry.configs.json_lines import JsonPath, one_line, shorten

EXPERTS = "*.mlp.experts"  # the one group's target, as shown
_EXPERTS = re.compile(r"(?:^|.*\.)experts(?:\.(?:gate_up_proj|down_proj))?$")
_BOUNDARY = r"(?:(?<=\.)|(?=\.|$))"


def _experts_module(name: str) -> str:
    """`...mlp.experts` for an experts module or one of its stems (`...experts.down_proj`)."""
    return name.rsplit(".", 1)[0] if not name.endswith("experts") else name


def skips(pattern: str, name: str) -> bool:
    """transformers' should_convert_module (negated): does `pattern` keep `name` unconverted."""
    try:
        return bool(re.match(rf"(?:{pattern}){_BOUNDARY}", name)) or name.endswith(pattern)
    except (re.error, RecursionError, OverflowError):
        return False


def target_rank(kind: str, target: str, name: str, type_name: str) -> Optional[int]:
    """The experts group claims an experts module and its two stems (rank 2); a
    modules_to_not_convert pattern claims what it keeps in bf16 (rank -1, it wins), matched
    against the experts module for a stem, as transformers checks `f"{mlp}.experts"`."""
    experts = _EXPERTS.match(name) is not None
    if kind == "experts":
        return 2 if experts else None
    if kind == "modules_to_not_convert":
        return -1 if skips(target, _experts_module(name) if experts else name) else None
    return None


def read_gptoss(q: Mapping[str, Any], root: str, loc: JsonPath = ()) -> ConfigReading:
    """The experts group (MXFP4 weights, stored), then each modules_to_not_convert entry."""
    mloc = loc + ("quant_method",)
    b = SpecBuilder("weight", "experts", mloc)
    said = 'quant_method: "mxfp4" (gpt-oss: experts\' *_blocks / *_scales)'
    b.fact("format", "mxfp4", said)
    b.fact("scale.format", "e8m0", said)
    b.fact("scale.granularity", "block", said)
    b.fact("scale.block", 32, said)
    b.fact("scale.rounding", None, "the rounding is not recorded; the scales are stored")
    b.fact("static", True, said)
    groups = [GroupReading(root or "quantization_config", "experts", (EXPERTS,), b.build(True),
                           loc=loc)]
    if q.get("dequantize") is True:
        groups.append(GroupReading(field_path(root, "dequantize"), "not mapped", (),
                                   loc=loc + ("dequantize",),
                                   note="not mapped: dequantize true (transformers loads the "
                                        "experts as bf16); the stored MXFP4 is read as is"))
    skip = q.get("modules_to_not_convert")
    path, sloc = field_path(root, "modules_to_not_convert"), loc + ("modules_to_not_convert",)
    if skip is not None and not isinstance(skip, list):
        return ConfigReading("gpt-oss", root, tuple(groups) + (GroupReading(
            path, "modules_to_not_convert", (), loc=sloc, problems=((sloc, (
                f"modules_to_not_convert: {dump(skip)[:40]} is not a list of module names / "
                "patterns")),)),))
    for i, pattern in enumerate(skip or []):
        at = sloc + (i,)
        problem = None
        if not isinstance(pattern, str):
            problem = f"{dump(pattern)[:40]} is not a module name or pattern (text)"
        else:
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as e:
                problem = (f"{dump(pattern)} is not a valid regular expression "
                           f"({shorten(str(e))}); transformers matches these as regexes")
        if problem:
            groups.append(GroupReading(key_path(path, i), "modules_to_not_convert", (), loc=at,
                                       problems=((at, problem),)))
        else:
            groups.append(GroupReading(key_path(path, i), "modules_to_not_convert", (pattern,),
                                       loc=at, note=f"not quantized (modules_to_not_convert "
                                                    f"{one_line(pattern)})"))
    return ConfigReading("gpt-oss", root, tuple(groups))


__all__ = ["EXPERTS", "read_gptoss", "skips", "target_rank"]
