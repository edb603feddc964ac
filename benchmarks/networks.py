"""Real networks with adaptive pooling, written out in plain torch for the tool-cost benchmark.

torchvision's AlexNet and VGG11-BN and segmentation-models-pytorch's PSPNet and UPerNet (ResNet-18 encoder),
layer for layer as those libraries define them (the same convolutions, norms, pools and weights' shapes, so
the exported files have the same size and node count), with random weights: torchvision's wheel does not
import beside torch's CPU build, and the benchmark downloads nothing.

    NETWORKS[name]() -> (module, example input shape)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def alexnet() -> nn.Module:
    """torchvision.models.alexnet: 61 M parameters (244 MB); AdaptiveAvgPool2d((6, 6))."""
    features = nn.Sequential(
        nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
    classifier = nn.Sequential(
        nn.Dropout(0.5), nn.Linear(256 * 36, 4096), nn.ReLU(inplace=True),
        nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, 1000))
    return nn.Sequential(features, nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(1), classifier)


def vgg11_bn() -> nn.Module:
    """torchvision.models.vgg11_bn: 133 M parameters (531 MB); AdaptiveAvgPool2d((7, 7))."""
    layers: list[nn.Module] = []
    c_in = 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(c_in, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            c_in = v
    classifier = nn.Sequential(
        nn.Linear(512 * 49, 4096), nn.ReLU(True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(4096, 1000))
    return nn.Sequential(nn.Sequential(*layers), nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(1), classifier)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)
        self.downsample = (nn.Sequential(nn.Conv2d(c_in, c, 1, stride, bias=False), nn.BatchNorm2d(c))
                           if stride != 1 or c_in != c else nn.Identity())

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.downsample(x))


class ResNet18Encoder(nn.Module):
    """smp's resnet18 encoder: the feature maps at strides 1 (the input), 2, 4, 8, 16 and 32, up to ``depth``."""

    def __init__(self, depth: int = 5):
        super().__init__()
        self.depth = depth
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = (64, 128, 256, 512)[:max(depth - 1, 1)]
        self.layers = nn.ModuleList()
        c_in = 64
        for i, c in enumerate(widths):
            self.layers.append(nn.Sequential(BasicBlock(c_in, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)))
            c_in = c
        self.out_channels = (3, 64) + widths

    def forward(self, x):
        feats = [x]
        x = F.relu(self.bn1(self.conv1(x)))
        feats.append(x)
        x = self.maxpool(x)
        for layer in self.layers:
            x = layer(x)
            feats.append(x)
        return feats[:self.depth + 1]


def conv_bn_relu(c_in: int, c: int, k: int, batchnorm: bool = True) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c, k, padding=k // 2, bias=not batchnorm),
                         nn.BatchNorm2d(c) if batchnorm else nn.Identity(), nn.ReLU(inplace=True))


class PSPStage(nn.Module):
    """AdaptiveAvgPool2d(size), a 1x1 conv (no BatchNorm at size 1, as smp), bilinear back to the input's size."""

    def __init__(self, c_in: int, c: int, size: int, align_corners: bool):
        super().__init__()
        self.pool, self.conv = nn.AdaptiveAvgPool2d(size), conv_bn_relu(c_in, c, 1, batchnorm=size != 1)
        self.align_corners = align_corners

    def forward(self, x):
        y = self.conv(self.pool(x))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=self.align_corners)


class PSPNet(nn.Module):
    """smp.PSPNet(resnet18, encoder_depth=3, psp_out_channels=512, classes=1): pools (1, 2, 3, 6) at stride 8."""

    def __init__(self):
        super().__init__()
        self.encoder = ResNet18Encoder(depth=3)
        c = self.encoder.out_channels[-1]
        self.stages = nn.ModuleList(PSPStage(c, c // 4, s, True) for s in (1, 2, 3, 6))
        self.conv = conv_bn_relu(c * 2, 512, 1)
        self.head = nn.Conv2d(512, 1, 3, padding=1)

    def forward(self, x):
        f = self.encoder(x)[-1]
        y = self.conv(torch.cat([s(f) for s in self.stages] + [f], dim=1))
        return F.interpolate(self.head(y), scale_factor=8, mode="bilinear", align_corners=True)


class UPerNet(nn.Module):
    """smp.UPerNet(resnet18, decoder_channels=256, classes=1): a PSP module (pools 1, 2, 3, 6) on the stride-32
    features, an FPN over strides 4 to 32, the four levels fused at stride 4."""

    def __init__(self, c: int = 256):
        super().__init__()
        self.encoder = ResNet18Encoder(depth=5)
        chans = self.encoder.out_channels[2:]  # strides 4, 8, 16, 32
        self.psp = nn.ModuleList(PSPStage(chans[-1], c, s, False) for s in (1, 2, 3, 6))
        self.bottleneck = conv_bn_relu(chans[-1] + 4 * c, c, 3)
        self.lateral = nn.ModuleList(conv_bn_relu(ch, c, 1) for ch in chans[:-1])
        self.fpn = nn.ModuleList(conv_bn_relu(c, c, 3) for _ in chans[:-1])
        self.fuse = conv_bn_relu(4 * c, c, 3)
        self.head = nn.Conv2d(c, 1, 3, padding=1)

    def forward(self, x):
        feats = self.encoder(x)[2:]
        top = feats[-1]
        top = self.bottleneck(torch.cat([s(top) for s in self.psp] + [top], dim=1))
        levels = [top]
        for f, lateral in zip(reversed(feats[:-1]), reversed(self.lateral)):
            top = lateral(f) + F.interpolate(top, size=f.shape[-2:], mode="bilinear", align_corners=False)
            levels.append(top)
        levels = levels[:1] + [fpn(y) for fpn, y in zip(reversed(self.fpn), levels[1:])]
        size = levels[-1].shape[-2:]
        y = self.fuse(torch.cat([F.interpolate(y, size=size, mode="bilinear", align_corners=False)
                                 for y in reversed(levels)], dim=1))
        return F.interpolate(self.head(y), scale_factor=4, mode="bilinear", align_corners=False)


#: name -> (constructor, example input shape): the traced sizes the issue's table used
NETWORKS = {
    "alexnet": (alexnet, (1, 3, 300, 300)),
    "vgg11_bn": (vgg11_bn, (1, 3, 260, 260)),
    "pspnet_resnet18": (PSPNet, (1, 3, 300, 300)),
    "upernet_resnet18": (UPerNet, (1, 3, 320, 320)),
}
