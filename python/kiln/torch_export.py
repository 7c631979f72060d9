"""kiln.export(model, example_inputs, path): a PyTorch model as kiln's standalone library, the
counterpart of AOTInductor. torch.export traces the model; its ATen graph (core
decompositions) is lowered as torch.compile's backend lowers a graph, with every parameter,
buffer and tensor constant frozen as a weight; kiln export then writes libNAME.so, NAME.h (a C
API), the weights (embedded, or NAME.safetensors beside the library) and README.txt. A C or
C++ program links the library without kiln or PyTorch (examples/export/consumer.c). Dimensions
given as torch.export.Dim are dynamic dimensions of the library, as torch.compile's symbolic
sizes are (kiln.torch_shapes).
"""
import os
import re

import torch
from torch._decomp import core_aten_decompositions
from torch.export.graph_signature import InputKind, OutputKind

from . import _kiln
from .torch_backend import _Support, _constant_nodes, _op_name, build_graph


def _c_name(text):
    name = re.sub(r"\W", "_", text).lower()
    return name if name and not name[0].isdigit() else "model_" + name


def export(model, example_inputs, path, name=None, embed_weights=True, dynamic_shapes=None):
    """Exports `model` (an nn.Module, in the mode it is in: call .eval() for inference) traced
    on `example_inputs` (a tuple of tensors) into the folder `path`. name: the library's C
    name (default: the model's class name). dynamic_shapes: torch.export's, e.g.
    {"x": {0: torch.export.Dim("batch")}}: those dimensions are dynamic in the library (its
    header reports them as -1). Returns a dict of the files written.

    Raises kiln.UnsupportedError naming the ops kiln does not lower, or a weight kind it
    cannot freeze (a buffer the model mutates)."""
    name = _c_name(name or type(model).__name__)
    with torch.no_grad():
        program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        program = program.run_decompositions(core_aten_decompositions())
    gm = program.graph_module
    signature = program.graph_signature
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    frozen, names = {}, [None] * len(placeholders)
    for i, (spec, node) in enumerate(zip(signature.input_specs, placeholders)):
        if spec.kind == InputKind.USER_INPUT:
            names[i] = node.name
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            source = program.state_dict if spec.target in program.state_dict \
                else program.constants
            frozen[i] = source[spec.target]
        else:
            raise _kiln.UnsupportedError(f"kiln.export: input '{node.name}' is a {spec.kind.name}")
    for spec in signature.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT:
            raise _kiln.UnsupportedError(
                f"kiln.export: the model writes {spec.kind.name} '{spec.target}' (a buffer a "
                "training-mode layer updates? export the model in eval())")
    constants = _constant_nodes(gm, frozen, "cpu")
    support = _Support(constants)
    missing = sorted({_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"
                      and not support.is_node_supported({}, n)})
    if missing:
        raise _kiln.UnsupportedError("kiln.export: kiln does not lower " + ", ".join(missing))
    g, _, _ = build_graph(gm, frozen, constants, name=name, input_names=names)
    os.makedirs(path, exist_ok=True)
    return _kiln.export_graph(g, os.fspath(path), name, embed_weights)
