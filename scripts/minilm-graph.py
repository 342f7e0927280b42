#!/usr/bin/env python3
"""Write app/embeddings/minilm.onnx: all-MiniLM-L6-v2 as an ONNX graph without its weights.

The graph is what sentence-transformers computes for this model (BERT's embeddings and six
encoder layers, then the mean of the token states under the attention mask, then L2
normalisation), written out op by op with the `onnx` package from the model's config.json. Its
weights are not in it: each is declared by its name in the model's model.safetensors, and the
`local` provider hands them over from that file when it loads the graph. So the graph is a few
kilobytes kept in the repository, no weights are copied or converted, and no torch is needed
anywhere.

    scripts/minilm-graph.py           # rewrite the graph (needs the `onnx` package: the dev group)
    scripts/minilm-graph.py --check   # exit 1 if the file differs from what this script writes
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from app.embeddings.local import GRAPH as OUT
from app.embeddings.local import bundled_model_dir, map_weights

OPSET = 20  # Gelu is a standard operator from opset 20 on
FLOAT_MIN = float(np.finfo(np.float32).min)  # what a masked position adds to its attention scores


class Graph:
    """Nodes and constants, each node's output named after the node."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []

    def op(self, kind: str, *inputs: str, name: str, **attributes: object) -> str:
        self.nodes.append(helper.make_node(kind, list(inputs), [name], name=name, **attributes))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        self.constants.append(
            helper.make_tensor(
                name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape, value.flatten().tolist()
            )
        )
        return name


def weights(model_dir: Path) -> list[onnx.TensorProto]:
    """The weights, declared by name, shape and type; the `local` provider supplies their data."""
    declared = []
    for name, tensor in sorted(map_weights(model_dir / "model.safetensors").items()):
        proto = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=tensor.shape)
        proto.data_location = TensorProto.EXTERNAL
        proto.external_data.add(key="location", value="model.safetensors")
        declared.append(proto)
    return declared


def build(model_dir: Path) -> onnx.ModelProto:
    config = json.loads((model_dir / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head = hidden // heads
    g = Graph()
    shape = g.op("Shape", "input_ids", name="batch_and_length")  # [B, S]
    length = g.op("Shape", "input_ids", name="length", start=1, end=2)  # [S]
    heads_shape = g.op("Concat", shape, g.const("heads_and_size", np.array([heads, head])), name="shape_bshd", axis=0)
    tokens_shape = g.op("Concat", shape, g.const("hidden", np.array([hidden])), name="shape_bsh", axis=0)
    flat = g.const("flat", np.array([-1, hidden]))

    # Embeddings: word + position + token type 0, then LayerNorm; then tokens as rows of a matrix.
    e = "embeddings."
    words = g.op("Gather", f"{e}word_embeddings.weight", "input_ids", name="words")
    zero, one = g.const("zero", np.array([0])), g.const("one", np.array([1]))
    positions = g.op("Slice", f"{e}position_embeddings.weight", zero, length, zero, name="positions")
    token_type = g.op("Gather", f"{e}token_type_embeddings.weight", g.const("type_0", np.array(0)), name="type_0_row")
    x = g.op("Add", g.op("Add", words, positions, name="words_at"), token_type, name="embedded")
    eps = config["layer_norm_eps"]
    x = g.op("LayerNormalization", x, f"{e}LayerNorm.weight", f"{e}LayerNorm.bias", name="embedded_norm", epsilon=eps)
    x = g.op("Reshape", x, flat, name="tokens")

    # Padding is left out of attention: -max added to its scores, [B, 1, 1, S].
    mask = g.op("Cast", "attention_mask", name="mask", to=TensorProto.FLOAT)
    unmasked = g.op("Sub", g.const("f_one", np.array(1.0, dtype=np.float32)), mask, name="padding")
    scores_bias = g.op("Mul", unmasked, g.const("f_min", np.array(FLOAT_MIN, dtype=np.float32)), name="padding_bias")
    scores_bias = g.op("Unsqueeze", scores_bias, g.const("axes_1_2", np.array([1, 2])), name="scores_bias")
    scale = g.const("scale", np.array(1 / np.sqrt(head), dtype=np.float32))

    def dense(x: str, weight: str, name: str) -> str:
        return g.op("Gemm", x, f"{weight}.weight", f"{weight}.bias", name=name, transB=1)

    def split_heads(x: str, name: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", x, heads_shape, name=f"{name}_bshd"), name=name, perm=perm)

    def add_and_norm(x: str, residual: str, norm: str, name: str) -> str:
        """LayerNorm(x + residual), with the weights of `norm` (a LayerNorm's name prefix)."""
        summed = g.op("Add", x, residual, name=f"{name}_res")
        return g.op("LayerNormalization", summed, f"{norm}.weight", f"{norm}.bias", name=f"{name}_norm", epsilon=eps)

    for i in range(config["num_hidden_layers"]):
        p, n = f"encoder.layer.{i}.", f"l{i}_"
        q = split_heads(dense(x, f"{p}attention.self.query", f"{n}q"), f"{n}q_heads", [0, 2, 1, 3])
        k = split_heads(dense(x, f"{p}attention.self.key", f"{n}k"), f"{n}k_heads", [0, 2, 3, 1])
        v = split_heads(dense(x, f"{p}attention.self.value", f"{n}v"), f"{n}v_heads", [0, 2, 1, 3])
        scores = g.op("Mul", g.op("MatMul", q, k, name=f"{n}qk"), scale, name=f"{n}scores_scaled")
        probs = g.op("Softmax", g.op("Add", scores, scores_bias, name=f"{n}scores"), name=f"{n}probs", axis=-1)
        context = g.op("Transpose", g.op("MatMul", probs, v, name=f"{n}ctx"), name=f"{n}ctx_bshd", perm=[0, 2, 1, 3])
        attended = dense(g.op("Reshape", context, flat, name=f"{n}ctx_flat"), f"{p}attention.output.dense", f"{n}att")
        x = add_and_norm(attended, x, f"{p}attention.output.LayerNorm", f"{n}att")
        inner = g.op("Gelu", dense(x, f"{p}intermediate.dense", f"{n}inner"), name=f"{n}gelu")
        x = add_and_norm(dense(inner, f"{p}output.dense", f"{n}out"), x, f"{p}output.LayerNorm", f"{n}out")

    # The mean of the token states under the mask, then unit length (sentence-transformers' Pooling
    # and Normalize modules, with their epsilons).
    states = g.op("Reshape", x, tokens_shape, name="states")
    weight = g.op("Unsqueeze", mask, g.const("axis_2", np.array([2])), name="mask_bs1")
    axis_1 = g.const("axis_1", np.array([1]))
    summed = g.op("ReduceSum", g.op("Mul", states, weight, name="masked"), axis_1, name="summed", keepdims=0)
    counted = g.op("ReduceSum", weight, axis_1, name="counted", keepdims=0)
    counted = g.op("Max", counted, g.const("count_eps", np.array(1e-9, dtype=np.float32)), name="count")
    mean = g.op("Div", summed, counted, name="mean")
    norm = g.op("ReduceL2", mean, one, name="norm_raw", keepdims=1)
    norm = g.op("Max", norm, g.const("norm_eps", np.array(1e-12, dtype=np.float32)), name="norm")
    g.op("Div", mean, norm, name="sentence_embedding")

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        inputs=[
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        outputs=[helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializer=[*weights(model_dir), *g.constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="engram")
    model.ir_version = 10
    return model


def main() -> None:
    files = bundled_model_dir()
    if files is None:
        sys.exit("the model's package (engram-graph-model) is not installed with its files: run `make install-dev`")
    data = build(files).SerializeToString(deterministic=True)
    if sys.argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_bytes() != data:
            sys.exit(f"{OUT} is out of date: run scripts/minilm-graph.py")
        return
    OUT.write_bytes(data)
    print(f"wrote {OUT} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
