"""inspect, beside patch: model.py plans a model as patch does and lints it (inspect_model); report.py
formats it; windows.py and inspection/window_view.py draw the windows (inspect --windows, onnxpoolfix windows)."""
