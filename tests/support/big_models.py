"""A > 2 GiB model with external weights, written in chunks (tests/io/test_io.py, test_large_models.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_big_model(folder: Path, rows: int, cols: int, count: int, *, sparse: bool = False) -> Path:
    """count initializers W_i[rows, cols] (float32, W_i[r, c] = (r*7 + c + i) % 1009) in one external file,
    generated in 64 MB chunks so the weights are never all in memory; y = sum_i Gather(W_i, idx) + bias.
    ``sparse``: the file is only extended to its size (all zeros, no disk written), for tests that never run
    the model."""
    data = folder / "weights.bin"
    inits, nodes, chunk_rows = [], [], max(1, (64 << 20) // (cols * 4))
    offset = 0
    with open(data, "wb") as f:
        for i in range(count):
            for r0 in range(0, 0 if sparse else rows, chunk_rows):
                r = np.arange(r0, min(rows, r0 + chunk_rows), dtype=np.int64)[:, None]
                f.write(((r * 7 + np.arange(cols) + i) % 1009).astype(np.float32).tobytes())
            length = rows * cols * 4
            t = TensorProto(name=f"W{i}", dims=[rows, cols], data_type=TensorProto.FLOAT, raw_data=b"")
            onnx.external_data_helper.set_external_data(t, "weights.bin", offset, length)  # needs raw_data set
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            inits.append(t)
            offset += length
            nodes.append(helper.make_node("Gather", [f"W{i}", "idx"], [f"g{i}"]))
        if sparse:
            f.truncate(offset)
    inits.append(numpy_helper.from_array(np.full((cols,), 0.5, np.float32), "bias"))
    nodes.append(helper.make_node("Sum", [f"g{i}" for i in range(count)] + ["bias"], ["y"]))
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, cols])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path
