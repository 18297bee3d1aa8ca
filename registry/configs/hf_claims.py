"""Which config entry decides a module, and refusing the cases where two compressed-tensors
config groups claim the same modules (a W4A4 group silently losing to a W4A16 one, or the
other way round, is the seed bug again).

Why refuse: compressed-tensors and vLLM both build one `target -> scheme` dict over
`config_groups` in order, so a target written in two groups silently goes to the *last* one;
and for a module matched by targets of two groups they rank differently (compressed-tensors:
exact name > `re:` > class name; vLLM: the first name match, exact or `re:`, in config order,
then the class name). The registry guesses neither:

- config level (`shared_targets`): the same target string (`"Linear"`, one `re:` pattern, one
  module name) in two groups is an error on the later group, naming both groups' lines;
- module level (`decide`): a module claimed by two groups through name targets (exact or
  `re:`), or through class names, is a `ClaimError` naming both. A name target over a class
  name is the one precedence both runtimes agree on, and is followed: with `Linear` in one
  group and `re:.*q_proj` in another, q_proj takes the `re:` group.

ignore / exclude entries always win (both runtimes skip an ignored module). Quark entries keep
vLLM's QuarkConfig order (exclude, then the first matching layer_quant_config pattern, then
the layer type, then the global config); only compressed-tensors groups are checked here.
Nothing here imports torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Optional

from registry.configs.hf_reading import ConfigReading, Problem, dump, key_path
from registry.configs.json_lines import JsonPath, one_line

if TYPE_CHECKING:  # hf_config imports this module
    from registry.configs.hf_config import ConfigGroup

CONFIG_GROUP = "config group"


class ClaimError(ValueError):
    """Two compressed-tensors config groups claim one module (one line, both groups' lines)."""


def _where(shown: str, line: Optional[int]) -> str:
    return shown if line is None else f"{shown}:{line}"


def shared_targets(reading: ConfigReading, line_of: Callable[[JsonPath], Optional[int]]
                   ) -> dict[int, Problem]:
    """{index of a group in `reading.groups`: the problem of its first target already written
    in an earlier config group}; `line_of` gives the line of a JSON path."""
    seen: dict[str, tuple[str, JsonPath]] = {}
    out: dict[int, Problem] = {}
    for i, g in enumerate(reading.groups):
        if g.kind != CONFIG_GROUP:
            continue
        mine: dict[str, JsonPath] = {}
        for j, t in enumerate(g.targets):
            mine.setdefault(t, g.loc + ("targets", j))
        for t, loc in mine.items():
            if t in seen and i not in out:
                other, other_loc = seen[t]
                line = line_of(other_loc)
                at = "" if line is None else f" (line {line})"
                out[i] = (loc, f"{key_path('targets', loc[-1])}: {dump(t)} is also a target of "
                               f"{other}{at}; compressed-tensors and vLLM give these modules "
                               "to the last group, the registry refuses to guess: make the "
                               "groups' targets disjoint, or list the modules in ignore")
            seen.setdefault(t, (g.path, loc))
    return out


def _claim(g: "ConfigGroup", name: str, type_name: str) -> tuple[str, Optional[int]]:
    """(the most specific target of `g` claiming `name`, its line)."""
    lines = g.target_lines or (g.line,) * len(g.targets)
    ranked = [(r, t, line) for t, line in zip(g.targets, lines)
              if (r := g.target_rank(t, name, type_name)) is not None]
    _, t, line = min(ranked, key=lambda x: x[0])
    return t, line


def decide(groups: Iterable["ConfigGroup"], name: str,
           type_name: str = "Linear") -> Optional["ConfigGroup"]:
    """The entry that decides module `name` (class `type_name`): an exclude / ignore entry
    first, then the most specific group (first in config order on a tie, Quark's rule); None
    if none. ClaimError when two compressed-tensors config groups tie (see the module
    docstring)."""
    best: Optional[tuple[int, int, "ConfigGroup"]] = None
    tied: list[tuple[int, "ConfigGroup"]] = []  # config groups at the best level: (rank, g)
    for i, g in enumerate(groups):
        r = g.match_rank(name, type_name)
        if r is None:
            continue
        if best is None or (r, i) < best[:2]:
            best = (r, i, g)
        if g.kind == CONFIG_GROUP:
            tied.append((r, g))
    if best is None or best[2].kind != CONFIG_GROUP:
        return None if best is None else best[2]
    level = 0 if best[0] <= 1 else 1  # name targets (exact, re:) | class names
    rivals = [g for r, g in tied if (0 if r <= 1 else 1) == level]
    if len(rivals) > 1:
        first, second = rivals[0], rivals[1]
        (t1, line1), (t2, line2) = _claim(first, name, type_name), \
            _claim(second, name, type_name)
        at1 = "" if line1 is None else f" (line {line1})"
        raise ClaimError(
            f"{_where(second.source, line2)}: {second.path}: target {dump(t2)} claims module "
            f"{one_line(name)}, and so does target {dump(t1)} of {first.path}{at1}; a module "
            "takes one scheme and the registry does not guess which group was meant: make "
            "the groups' targets disjoint, or list the module in ignore")
    return best[2]


__all__ = ["ClaimError", "decide", "shared_targets"]
