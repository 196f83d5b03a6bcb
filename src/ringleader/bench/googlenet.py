"""GoogLeNet as torchvision defines it (without the auxiliary heads)."""

from __future__ import annotations

from typing import Any


def googlenet(num_classes: int = 1000) -> Any:
    import torch
    from torch import nn

    def conv(cin: int, cout: int, k: int, stride: int = 1, padding: int = 0) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=False),
            nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True),
        )  # fmt: skip

    class Inception(nn.Module):
        def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pp: int):
            super().__init__()
            self.b1 = conv(cin, c1, 1)
            self.b2 = nn.Sequential(conv(cin, c3r, 1), conv(c3r, c3, 3, padding=1))
            # torchvision uses a 3x3 conv in the "5x5" branch (kept for weight compatibility).
            self.b3 = nn.Sequential(conv(cin, c5r, 1), conv(c5r, c5, 3, padding=1))
            self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv(cin, pp, 1))

        def forward(self, x: Any) -> Any:
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    return nn.Sequential(
        conv(3, 64, 7, stride=2, padding=3), nn.MaxPool2d(3, 2, ceil_mode=True),
        conv(64, 64, 1), conv(64, 192, 3, padding=1), nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1024, num_classes),
    )  # fmt: skip
