"""TFLite through onnx2tf, the converter its users run (PyPI's `onnx2tf`, `tensorflow`, `tf_keras` and
`ai-edge-litert`: the `runtimes` extra).

onnx2tf rewrites the file it is given, so it gets a copy in a scratch folder; it converts one input shape
(``-ois``) and mostly writes channels-last models: an input is fed in the layout its converted shape shows;
each output is flattened in the graph first (a Reshape to [-1], which onnx2tf converts in the ONNX file's
element order), so the values come back in that order whatever layout onnx2tf chose (a (1, 2, 2, 2) output
reads the same either way round). For a 3-channel input onnx2tf fetches
sample images from the network for its trial runs unless a file of them is in its working folder: the runner
writes one (random, fixed seed), so nothing is downloaded. Conversion and inference run in subprocesses (TensorFlow's import is slow and loud, and a
crash must fail one case, not the session)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from runtime_fixtures import run_apart

_RUN = r"""
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
path, n_in, *rest = sys.argv[1:]
ins, outs = rest[:int(n_in)], rest[int(n_in):]
it = Interpreter(model_path=path)
details = it.get_input_details()
def last(a):
    return np.transpose(a, (0,) + tuple(range(2, a.ndim)) + (1,))
arrays = []
for d, f in zip(details, ins):  # the layout onnx2tf chose for the input, read off its converted shape
    a = np.load(f)
    arrays.append(a if a.ndim < 3 or tuple(d["shape"]) == a.shape else last(a))
for d, a in zip(details, arrays):
    it.resize_tensor_input(d["index"], a.shape)
it.allocate_tensors()
for d, a in zip(details, arrays):
    it.set_tensor(d["index"], a)
it.invoke()
for d, f in zip(it.get_output_details(), outs):
    np.save(f, it.get_tensor(d["index"]))
"""


#: what onnx2tf reads from its working folder instead of downloading it (common_functions.download_test_image_data)
SAMPLE_IMAGES = "calibration_image_sample_data_20x128x128x3_float32.npy"


class TfliteFailed(RuntimeError):
    """onnx2tf or the TFLite interpreter refused or crashed; the message says which and its last lines."""


def tflite_run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``model`` converted by onnx2tf at the feed's shapes and run by the TFLite interpreter (float32 model):
    each output flattened, in the ONNX file's element order. Raises :class:`TfliteFailed`."""
    flat = onnx.ModelProto()
    flat.CopyFrom(model)
    shape = onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat_shape")
    flat.graph.initializer.append(shape)
    for out in flat.graph.output:
        flat.graph.node.append(onnx.helper.make_node("Reshape", [out.name, shape.name], [out.name + "_flat"]))
        out.name += "_flat"
        out.type.tensor_type.ClearField("shape")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.onnx"  # a copy: onnx2tf rewrites its input in place
        onnx.save(flat, path)
        np.save(Path(d) / SAMPLE_IMAGES, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
        shapes = [f"{vi.name}:{','.join(map(str, feed[vi.name].shape))}" for vi in model.graph.input]
        rc, tail = run_apart([sys.executable, "-m", "onnx2tf", "-i", str(path), "-o", str(Path(d) / "tf"), "-n",
                              "-ois", *shapes], cwd=d, timeout=600)
        converted = Path(d) / "tf" / "model_float32.tflite"
        if rc or not converted.exists():
            raise TfliteFailed(f"onnx2tf: exit {rc}: {tail}")
        ins = []
        for i, vi in enumerate(model.graph.input):
            ins.append(str(Path(d) / f"in{i}.npy"))
            np.save(ins[-1], feed[vi.name])
        outs = [str(Path(d) / f"out{i}.npy") for i in range(len(model.graph.output))]
        rc, tail = run_apart([sys.executable, "-c", _RUN, str(converted), str(len(ins)), *ins, *outs])
        if rc:
            raise TfliteFailed(f"TFLite: exit {rc}: {tail}")
        return {o.name: np.load(p) for o, p in zip(model.graph.output, outs)}
