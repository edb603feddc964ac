"""torch.jit.script'ed models with leftovers inside control flow (If branches, Loop bodies), exported as real
users export them (TorchScript, ONNX_FALLTHROUGH): shared by tests/rewrite/test_control_flow.py (patch) and
tests/inspection/test_inspect_bodies.py (inspect)."""
from __future__ import annotations

import io
import warnings

import onnx


def export_scripted(torch, module, args, names, dynamic_axes=None):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), args, f, dynamo=False, input_names=names,
                          dynamic_axes=dynamic_axes,
                          operator_export_type=torch.onnx.OperatorExportTypes.ONNX_FALLTHROUGH)
    return onnx.load_from_string(f.getvalue())


def if_modules(torch):
    """name -> (module, kind of the then branch, kind of the else branch, traced input shape). Written out
    one by one: torch.jit.script compiles source, not lambdas."""
    F = torch.nn.functional

    class AvgVsMax(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_avg_pool2d(x, 3)
            else:
                y = F.adaptive_max_pool2d(x, (3, 3))
            return y * 2.0 + 1.0

    class NonUniformBothWays(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_avg_pool2d(x, (5, 7))
            else:
                y = F.adaptive_max_pool2d(x, (5, 7))
            return y - 1.0

    class OneD(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_max_pool1d(x, 4)
            else:
                y = F.adaptive_avg_pool1d(x, 4)
            return y

    class UpsampleVsDown(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_avg_pool2d(x, (12, 5))
            else:
                y = F.adaptive_avg_pool2d(x, (3, 13)) * 0.5
            return y

    class AvgVsMaxDynamic(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_avg_pool2d(x, (3, 4))
            else:
                y = F.adaptive_max_pool2d(x, (3, 4))
            return y

    return {
        "avg3x3_vs_max3x3": (AvgVsMax(), "avg", "max", (1, 2, 9, 10)),
        "avg5x7_vs_max5x7": (NonUniformBothWays(), "avg", "max", (2, 3, 11, 10)),
        "max1d_vs_avg1d": (OneD(), "max", "avg", (1, 3, 13)),
        "upsample_vs_avg": (UpsampleVsDown(), "avg", "avg", (1, 1, 6, 9)),
        "dynamic": (AvgVsMaxDynamic(), "avg", "max", (1, 2, 9, 10)),
    }


def loop_modules(torch):
    """name -> module: "loop" pools in a Loop body (x: 1x2x9x10, n: trip count), "loop_if" pools in a Loop
    body and in both branches of an If inside it (x: 1x2x7x8). Called (x, n: int)."""
    F = torch.nn.functional

    class LoopPool(torch.nn.Module):
        def forward(self, x, n: int):
            acc = torch.zeros(1, 2, 4, 3)
            for i in range(n):
                acc = acc + F.adaptive_avg_pool2d(x * float(i + 1), (4, 3))
            return acc

    class Nested(torch.nn.Module):
        def forward(self, x, n: int):
            acc = torch.zeros(1, 2, 3, 3)
            for i in range(n):
                acc = acc + F.adaptive_avg_pool2d(x - float(i), (3, 3))  # a leftover in the body before the If
                if i % 2 == 0:
                    acc = acc + F.adaptive_max_pool2d(x + float(i), 3)
                else:
                    acc = acc + F.adaptive_avg_pool2d(x * float(i), 3)
            return acc

    return {"loop": LoopPool(), "loop_if": Nested()}


def chained_modules(torch):
    """name -> module, leftovers at the top level and in an If's branches, each reading the other's result:
    "pool_after_if" pools the If's (untyped) result, "if_after_pool" pools a top-level leftover's output in
    both branches. Called (x: 1x2x9x10, flag: bool)."""
    F = torch.nn.functional

    class PoolAfterIf(torch.nn.Module):
        def forward(self, x, flag: bool):
            if flag:
                y = F.adaptive_avg_pool2d(x, (6, 7))
            else:
                y = F.adaptive_max_pool2d(x, (6, 7))
            return F.adaptive_avg_pool2d(y, (4, 3))

    class IfAfterPool(torch.nn.Module):
        def forward(self, x, flag: bool):
            y = F.adaptive_max_pool2d(x, (6, 7))
            if flag:
                z = F.adaptive_avg_pool2d(y, (4, 3))
            else:
                z = F.adaptive_max_pool2d(y * 2.0, (5, 5))[:, :, :4, :3]
            return z

    return {"pool_after_if": PoolAfterIf(), "if_after_pool": IfAfterPool()}
