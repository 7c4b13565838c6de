"""Will TensorRT 10 take this ONNX graph? A CPU-side check of its ops and tensor types.

The deployment artifact is one ONNX graph per model, run by ONNX Runtime on a CPU and built into a
TensorRT engine on a GPU. A graph that ONNX Runtime runs can still be refused by TensorRT's parser, and
that would only show on the robot. This check needs neither a GPU nor TensorRT, so CI runs it on every
export. The rules are TensorRT 10's ONNX parser (onnx-tensorrt, docs/operators.md of release 10.x):
- every op is one the parser implements (OPS below: the ones that matter for this stack's graphs and
  their neighbours, not the whole list);
- UINT8 tensors only at the network's inputs and outputs and in Cast (so an image is cast to float
  before anything else touches it); no DOUBLE or STRING tensors;
- opset <= MAX_OPSET.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto

MAX_OPSET = 20  # highest default-domain opset TensorRT 10's parser reads
OPS = frozenset({
    "Abs", "Acos", "Add", "And", "ArgMax", "ArgMin", "Asin", "Atan", "AveragePool", "BatchNormalization",
    "Cast", "Ceil", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "CumSum",
    "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand",
    "Flatten", "Floor", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool",
    "GlobalMaxPool", "Greater", "GreaterOrEqual", "GroupNormalization", "GRU", "HardSigmoid", "HardSwish",
    "Identity", "If", "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "LogSoftmax", "Loop", "LSTM", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mish",
    "Mod", "Mul", "Neg", "NonZero", "Not", "OneHot", "Or", "Pad", "Pow", "PRelu", "QuantizeLinear",
    "Range", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "RNN", "Round",
    "ScatterElements", "ScatterND", "Selu", "Shape", "Sigmoid", "Sign", "Sin", "Size", "Slice", "Softmax",
    "Softplus", "Softsign", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tan", "Tanh", "Tile", "TopK",
    "Transpose", "Trilu", "Unsqueeze", "Where", "Xor",
})  # fmt: skip
UNSUPPORTED_TYPES = {TensorProto.DOUBLE: "DOUBLE", TensorProto.STRING: "STRING"}


def tensorrt_problems(model: onnx.ModelProto | str | Path) -> list[str]:
    """Reasons TensorRT 10 would refuse the graph; empty when it takes it."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    problems = []
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > MAX_OPSET:
            problems.append(f"opset {opset.version} > {MAX_OPSET}")
    graph = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.output, *graph.value_info)}
    types.update({t.name: t.data_type for t in graph.initializer})
    io = {v.name for v in (*graph.input, *graph.output)}
    for node in graph.node:
        where = f"{node.op_type} {node.name or '(unnamed)'}"
        if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            problems.append(f"{where}: op not supported by TensorRT 10")
        for name in (*node.input, *node.output):
            kind = types.get(name)
            if kind == TensorProto.UINT8 and node.op_type != "Cast":
                problems.append(f"{where}: uint8 tensor {name!r} (TensorRT: uint8 only at I/O and in Cast)")
            elif kind in UNSUPPORTED_TYPES:
                problems.append(f"{where}: {UNSUPPORTED_TYPES[kind]} tensor {name!r}")
    for name in io:
        if types.get(name) in UNSUPPORTED_TYPES:
            problems.append(f"graph I/O {name!r}: {UNSUPPORTED_TYPES[types[name]]}")
    return problems
