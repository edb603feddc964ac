"""From PyTorch: ``onnxpoolfix.export`` and the dynamo exporter's translation table (torch is optional).

* :mod:`.exporter` (``export``): torch.onnx.export (dynamo by default, or TorchScript + ONNX_FALLTHROUGH),
  then the patch, the comparison with torch and the atomic save (:mod:`onnxpoolfix.io`), in one call.
* :mod:`.translation` (``translation_table``): the ``custom_translation_table`` that keeps every adaptive
  pool from the dynamo exporter's decomposition and writes the ``org.pytorch.aten`` node the patch replaces.
* :mod:`.torch_check` (``verify_against_torch``): the saved file in onnxruntime against the torch module,
  at the example inputs and at the sizes :mod:`.sizes` picks inside the declared ``Dim`` ranges.

Nothing here imports torch (or onnxscript) at import time: ``import onnxpoolfix`` and the CLI never do.
The package is not named ``torch``: inside onnxpoolfix that name would read as the real torch.
"""
from .exporter import export
from .torch_check import TorchCheck, verify_against_torch
from .translation import translation_table

__all__ = ["export", "translation_table", "verify_against_torch", "TorchCheck"]
