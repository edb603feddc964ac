"""Running the model at a size the check considers, for the pooled tensors' shapes (check/sizes.py's probes)."""
from __future__ import annotations

import logging
from typing import Mapping

import numpy as np
import onnx

from ..graph.shapes import light_copy, onnx_inferred
from ..sessions import ort_session, ort_value
from .cut import cut_bytes
from .feeds import graph_inputs, random_feed

logger = logging.getLogger(__name__)


class Prober:
    """Runs the model with the pooled input tensors fetched as extra outputs; None where it fails."""

    def __init__(self, model, names: Mapping[str, int], model_dir, seed):
        self.model = model
        self.names = list(names)
        self.rng = np.random.default_rng(seed)
        self.inputs = {i.name for i in graph_inputs(model)}
        self.fetch = [n for n in self.names if n not in self.inputs]
        # the part of the model computing the pooled inputs (check/cut.py): the layers below are not run
        self.sess = ort_session(cut_bytes(model, [onnx.helper.make_tensor_value_info(n, names[n], None)
                                                  for n in self.fetch]), model_dir) if self.fetch else None
        self.session_inputs = {i.name for i in self.sess.get_inputs()} if self.sess else set()
        self.light = light_copy(model)  # for shape inference at each size, without the weights' bytes
        self.empty_anyway = self._empty_tensors({})

    def _empty_tensors(self, shapes) -> set[str] | None:
        """Tensors that onnx shape inference gives a zero or negative dim at these input sizes (None: it
        failed). Inference errors are not held against a size: other ops may be beyond onnx's inference."""
        light = onnx.ModelProto()
        light.CopyFrom(self.light)
        for vi in light.graph.input:
            if vi.name in shapes:
                dims = vi.type.tensor_type.shape
                dims.ClearField("dim")
                for d in shapes[vi.name]:
                    dims.dim.add().dim_value = int(d)
        inferred = onnx_inferred(light, f" at {shapes}")
        return None if inferred is None else {vi.name for vi in inferred.graph.value_info if any(
            d.HasField("dim_value") and d.dim_value <= 0 for d in vi.type.tensor_type.shape.dim)}

    def pooled(self, shapes) -> dict[str, tuple[int, ...]] | None:
        # a size too small for the network's convolutions/pools leaves some tensor empty; onnxruntime does
        # not always raise on those (its MaxPool traps with SIGFPE on a 1x1 map with a 3x3 window, taking
        # the process with it), so such sizes are never run
        empty = self._empty_tensors(shapes)
        if empty and empty - (self.empty_anyway or set()):
            logger.debug("probe at %s skipped: shape inference empties %s", shapes, sorted(empty)[:3])
            return None
        try:
            feed = {k: ort_value(v) for k, v in random_feed(self.model, shapes, self.rng).items()
                    if k in self.session_inputs}
            outs = self.sess.run_with_ort_values(self.fetch, feed) if self.fetch else []
        except Exception as e:  # noqa: BLE001 - a size the network cannot run at (too small for its convs)
            logger.debug("probe at %s failed: %s", shapes, e)
            return None
        # the shapes alone, read off the OrtValues (numpy has no bfloat16 to hand a pooled tensor back in)
        got = {n: tuple(int(d) for d in o.shape()) for n, o in zip(self.fetch, outs)}
        got.update({n: tuple(shapes[n]) for n in self.names if n in self.inputs})
        if any(0 in dims for dims in got.values()):  # ran, but a pooled tensor is empty: nothing to check
            return None
        return got

    def close(self):
        self.sess = None
