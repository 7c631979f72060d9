"""kiln: a tensor compiler whose models become cached native modules.

    import kiln, numpy as np
    f = kiln.compile("model.onnx")          # or a kiln.graph.Graph
    (y,) = f(np.ones((1, 784), np.float32))  # numpy arrays, PyTorch tensors, anything DLPack
    np.asarray(y)                            # shares kiln's memory

Arrays go in without a copy when kiln can describe their dtype and layout (strided and
offset views included); results are kiln.Tensor objects that numpy and PyTorch view through
__array__ / __dlpack__. Errors are kiln.Error subclasses carrying kiln's message.
"""
import os
import sys

from . import _kiln
from ._kiln import Error, InternalError, Tensor, UnsupportedError, UserError
from . import cache, graph

__all__ = ["compile", "source", "export", "Function", "Tensor", "Error", "UserError",
           "UnsupportedError", "InternalError", "cache", "graph", "as_tensor", "cuda_stream"]

Function = _kiln.Function


def _is_path(x):
    return isinstance(x, (str, bytes, os.PathLike))


def compile(path_or_graph, device="cpu", passes=None, precision=None, device_io=False):
    """Compiles an ONNX / kiln JSON model file or a kiln.graph.Graph through the kernel cache.

    device: "cpu" or "cuda". passes: rewrite passes, e.g. "-fusion" or "none" (default all).
    precision: "f32" or "bf16" (products by weights on bfloat16 operands, CPU only; default
    $KILN_PRECISION, else f32). device_io (with device="cuda"): inputs and outputs are device
    tensors, no copies at the edges (CUDA tensors; on the emulator, CPU arrays stand in).
    Returns a Function: call it with arrays (positionally in input order, or by name), or
    f.run([arrays], stream=handle) to run on a caller's CUDA stream.
    """
    if isinstance(path_or_graph, graph.Graph):
        return _kiln.compile_graph(path_or_graph, device, passes, precision=precision,
                                   device_io=device_io)
    if _is_path(path_or_graph):
        return _kiln.compile_path(os.fspath(path_or_graph), device, passes, precision,
                                  device_io)
    raise TypeError(f"kiln.compile expects a model path or a kiln.graph.Graph, got "
                    f"{type(path_or_graph).__name__}")


def source(path_or_graph, device="cpu", passes=None, precision=None):
    """The C source kiln generates for a model file or graph (what compile() would build)."""
    if not isinstance(path_or_graph, graph.Graph) and not _is_path(path_or_graph):
        raise TypeError("kiln.source expects a model path or a kiln.graph.Graph")
    return _kiln.source(path_or_graph if isinstance(path_or_graph, graph.Graph)
                        else os.fspath(path_or_graph), device, passes, precision)


def export(model, example_inputs, path, name=None, embed_weights=True, dynamic_shapes=None):
    """A PyTorch model as kiln's standalone library (libNAME.so, NAME.h, weights) in folder
    `path`, through torch.export: the counterpart of AOTInductor (see kiln.torch_export).
    dynamic_shapes (torch.export's) makes dimensions dynamic in the library."""
    from .torch_export import export as export_torch
    return export_torch(model, example_inputs, path, name, embed_weights, dynamic_shapes)


def cuda_stream():
    """A new stream of kiln's on its CUDA device (GPU or emulator): pass its .handle as
    Function.run's stream."""
    return _kiln.cuda_stream()


def as_tensor(array):
    """A kiln.Tensor viewing `array` (numpy, PyTorch, DLPack) without a copy where possible."""
    return _kiln._as_tensor(array)


# torch.compile(backend="kiln") after `import kiln` when PyTorch is in use (the
# torch_dynamo_backends entry point covers the case without the import).
if "torch" in sys.modules:
    from . import torch_backend as _torch_backend
    _torch_backend.register()
