# Everything runs in a local virtual environment (.venv), created on first use.
# torch is pinned exactly through constraints.txt (torch==2.13.0, the CPU build this project is tested with);
# pyproject's extras name the range a user's own torch may be in.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUNTIMES := $(VENV)/.runtimes-installed

.PHONY: demo test test-all test-runtimes bench bench-tool clean fixtures dynamo-exports

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# -qq: errors only; setuptools' editable install otherwise prints its informational "Editable installation" notice.
	@# --no-compile: no .pyc for the thousands of modules never imported (torch's): 51 s -> 28 s here; the ones
	@# imported are compiled at their first import
	$(PY) -m pip install --no-compile --quiet --quiet -c constraints.txt -e '.[test,dynamo]'
	touch $(STAMP)

## demo: patch a shipped fixture (a small conv net with AdaptiveAvgPool2d 7x7 at a non-divisible size) and show the report
demo: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/onnxpoolfix fixtures/small_convnet.onnx out/small_convnet.patched.onnx --report out/small_convnet.report.json

## test: the test suite as CI runs it (slow cases deselected; `make test-all` runs them)
test: $(STAMP)
	$(VENV)/bin/ruff check onnxpoolfix tests benchmarks fixtures/make_fixtures.py
	$(PY) -m pytest -n auto --dist worksteal -m "not slow" -q

## test-all: everything: the fast suite, the slow cases (2220 more round trips against torch, full-size
## AlexNet, the > 2 GB external-data models, the timed external-weights run) and a 2000-case fuzz
test-all: $(STAMP)
	$(VENV)/bin/ruff check onnxpoolfix tests benchmarks fixtures/make_fixtures.py
	ONNXPOOLFIX_FUZZ_CASES=2000 $(PY) -m pytest -m "slow or not slow" -q

## test-runtimes: the patched fixtures beyond onnxruntime (OpenVINO, tract; TVM, ncnn through pnnx, MNN, TFLite through
## onnx2tf, onnx2torch (installed on first use, about 2 GB; 10 minutes); writes docs/runtime-matrix.md; int8
## quantize_dynamic/quantize_static, fp16 weight storage, NaN/inf against torch), slow cases included
test-runtimes: $(RUNTIMES)
	ONNXPOOLFIX_RUNTIME_MATRIX=docs/runtime-matrix.md $(PY) -m pytest -n auto --dist worksteal -m "slow or not slow" -q \
		tests/test_runtimes.py \
		tests/test_runtime_ncnn.py tests/test_runtime_mnn.py tests/test_runtime_tflite.py tests/test_runtime_onnx2torch.py \
		tests/lowering/test_portable.py tests/lowering/test_quantized_fixtures.py tests/lowering/test_window_slices.py

# the runtimes extra (TVM, ncnn, pnnx, MNN, TensorFlow: about 2 GB) only where test-runtimes asks for it
$(RUNTIMES): $(STAMP)
	$(PY) -m pip install --no-compile --quiet --quiet -c constraints.txt -e '.[test,dynamo,runtimes]'
	@# onnx2torch without its declared torchvision: PyPI's torchvision does not import beside the CPU build of torch,
	@# and onnx2torch needs it only for NMS and RoiAlign (tests/test_runtime_onnx2torch.py)
	$(PY) -m pip install --no-compile --quiet --quiet --no-deps -c constraints.txt onnx2torch
	touch $(RUNTIMES)

## bench: speed of the patched graphs vs torch's kernel and the dynamo exporter (writes benchmarks/RESULTS.md),
## the plain dynamo export vs onnxpoolfix.export (writes benchmarks/RESULTS_dynamo_export.md), and dynamo
## exports repaired after the fact (before/after: nodes, latency, error off the traced size; RESULTS.md)
bench: $(STAMP)
	$(PY) benchmarks/bench.py
	$(PY) benchmarks/dynamo_export.py
	$(PY) benchmarks/dynamo_posthoc.py --rounds 10 --results
	$(PY) benchmarks/portable_speed.py --results

## bench-tool: the tool's own time and peak memory on real networks (and a 2.2 GB external-data one) vs onnx.load + onnx.save
bench-tool: $(STAMP)
	$(PY) benchmarks/bench_tool_cost.py

fixtures: $(STAMP)
	$(PY) fixtures/make_fixtures.py

## dynamo-exports: record again the dynamo exports the tests read (fixtures/dynamo/exports/, keyed by torch's
## version and everything the export depends on: tests/support/export_cache.py); the fast suite, exporting live
dynamo-exports: $(STAMP)
	rm -rf fixtures/dynamo/exports
	ONNXPOOLFIX_RECORD_EXPORTS=1 $(PY) -m pytest -n auto -m "not slow" -q

clean:
	rm -rf $(VENV) out .pytest_cache
