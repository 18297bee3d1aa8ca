"""A torch.compile backend for tests that keeps every graph Dynamo hands it (and runs it as is),
to count graphs and find the `ocp_mx::` custom ops in them."""
from __future__ import annotations

import torch


class Recorder:
    """A backend that keeps every graph Dynamo hands it and runs it as is."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs.append(gm)
        return gm.forward

    def op_calls(self, op: str = "ocp_mx.linear") -> list[torch.fx.Node]:
        """The graphs' calls of `op` (e.g. "ocp_mx.grouped_experts"), in order."""
        return [n for g in self.graphs for n in g.graph.nodes
                if n.op == "call_function" and op in str(n.target)]
