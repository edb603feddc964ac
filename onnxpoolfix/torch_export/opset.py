"""The dynamo exporter's ``opset_version`` below 18, with the nodes' metadata kept.

torch builds the graph at opset 18 or later and converts it down with onnx's C API version converter
(onnxscript's own converts upward only), which drops every node's ``metadata_props``: the stack trace and module
hierarchy that tell an adaptive pool from a genuine one. Without them the dynamo front end cannot tell a genuine
``MaxPool2d(2, 2)`` on symbolic H/W from an adaptive pool frozen at the traced size, and refuses (VGG at
``opset_version=17``, measured). :func:`onnxpoolfix.export` therefore takes torch's steps itself: the export at
opset 18 unoptimized, this conversion, then torch's optimizer; the conversion gives each converted node the
metadata of the node of the same name (the converter keeps node names; a node it adds has none, as in torch's
own file). Where the converter fails, the model stays at opset 18, as torch leaves it (converting from a later
opset instead can "succeed" with nodes left invalid at the target: measured on torchvision's MNASNet)."""
from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

#: below this opset torch's exporter converts through onnx's C API, which drops node metadata
KEEPS_METADATA_FROM = 18


def convert_keeping_metadata(program, opset: int) -> None:
    """Convert ``program.model`` (a torch ONNXProgram's onnx_ir model) to ``opset`` in place, as torch's
    ``opset_version`` does, with each node's metadata restored by name."""
    from onnxscript import version_converter

    model = program.model
    kept = {n.name: dict(n.metadata_props) for n in model.graph.all_nodes() if n.name and n.metadata_props}
    version_converter.convert_version(model, opset, fallback=True)
    if model.graph.opset_imports.get("") != opset:  # torch leaves such a model unconverted too, with a warning
        logger.warning("the exported graph could not be converted to opset %d: it stays at opset %s", opset,
                       model.graph.opset_imports.get(""))
    for node in model.graph.all_nodes():
        if node.name in kept and not node.metadata_props:
            node.metadata_props.update(kept[node.name])
