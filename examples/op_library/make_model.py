"""Writes rms_mlp.onnx, input.npy and expected.npy: an ONNX model whose first node is a
custom-domain op (com.example RmsNorm) that the example op library implements, followed by
standard ONNX ops. The expected output is computed here with numpy (float64), independently
of kiln. Run: python3 make_model.py (needs numpy and onnx)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(20261123)
D, H = 37, 16
scale = rng.uniform(0.5, 1.5, D).astype(np.float32)
w = rng.standard_normal((D, H)).astype(np.float32)
eps = 1e-5

nodes = [
    helper.make_node("RmsNorm", ["x", "scale"], ["n"], domain="com.example", epsilon=eps,
                     name="rms"),
    helper.make_node("MatMul", ["n", "w"], ["m"], name="fc"),
    helper.make_node("Relu", ["m"], ["y"], name="act"),
]
graph = helper.make_graph(
    nodes, "rms_mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", H])],
    [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(w, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.example", 1)])
model.ir_version = 8
onnx.save(model, "rms_mlp.onnx")

x = rng.standard_normal((5, D)).astype(np.float32)
x[2, 3] = 40.0  # one large value: the row's scale is dominated by it
xd = x.astype(np.float64)
n = xd / np.sqrt((xd * xd).mean(axis=-1, keepdims=True) + np.float32(eps)) * scale
y = np.maximum(n @ w.astype(np.float64), 0)
np.save("input.npy", x)
np.save("expected.npy", y.astype(np.float32))
