"""Standard model definitions, written out to match torchvision's architectures (and Horovod's
pytorch_mnist net, and tf_cnn_benchmarks' trivial model), so the bench needs no torchvision.
The parameter counts are checked against data/reference.toml [models]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringleader.bench.googlenet import googlenet
from ringleader.errors import UsageError
from ringleader.inputs import did_you_mean

MODELS = ("trivial", "mnist", "alexnet", "googlenet", "resnet50", "resnet152", "vgg16")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    channels: int = 3
    fixed_size: int | None = None  # mnist always sees 28x28
    num_classes: int = 1000


def spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}{did_you_mean(name.lower(), list(MODELS))}",
                         f"use one of: {', '.join(MODELS)}")  # fmt: skip
    if name == "mnist":
        return ModelSpec(name, channels=1, fixed_size=28, num_classes=10)
    return ModelSpec(name)


def build(name: str, image_size: int = 224) -> Any:
    """A fresh ``torch.nn.Module`` for ``name`` (input 3 x image_size^2, 1000 classes)."""
    s = spec(name)
    if name == "trivial":
        return _trivial(image_size, s.num_classes)
    if name == "mnist":
        return _mnist()
    if name == "alexnet":
        return _alexnet(s.num_classes)
    if name == "vgg16":
        return _vgg16(s.num_classes)
    if name == "googlenet":
        return googlenet(s.num_classes)
    return _resnet([3, 4, 6, 3] if name == "resnet50" else [3, 8, 36, 3], s.num_classes)


def _trivial(image_size: int, num_classes: int) -> Any:
    """tf_cnn_benchmarks' TrivialModel: affine(1), affine(4096), logits."""
    from torch import nn

    return nn.Sequential(
        nn.Flatten(), nn.Linear(3 * image_size * image_size, 1), nn.ReLU(inplace=True),
        nn.Linear(1, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes),
    )  # fmt: skip


def _mnist() -> Any:
    """Horovod's examples/pytorch/pytorch_mnist.py Net."""
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d()
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)

        def forward(self, x: Any) -> Any:
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = x.reshape(-1, 320)  # Horovod's view(), which channels-last (NHWC) activations refuse
            x = F.relu(self.fc1(x))
            x = F.dropout(x, training=self.training)
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def _alexnet(num_classes: int) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(),
        nn.Dropout(), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
        nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes),
    )  # fmt: skip


def _vgg16(num_classes: int) -> Any:
    from torch import nn

    layers: list[Any] = []
    cin = 3
    for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"):  # fmt: skip
        if v == "M":
            layers.append(nn.MaxPool2d(2, 2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
            cin = int(v)
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(), nn.Linear(4096, num_classes),
    )  # fmt: skip


def _resnet(blocks: list[int], num_classes: int) -> Any:
    """torchvision ResNet with Bottleneck blocks (stride on the 3x3 conv, "v1.5")."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))  # fmt: skip
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            identity = x if self.down is None else self.down(x)
            return self.relu(self.body(x) + identity)

    layers: list[Any] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]  # fmt: skip
    cin = 64
    for i, n in enumerate(blocks):
        width = 64 * 2**i
        for j in range(n):
            layers.append(Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def param_count(model: Any) -> int:
    return int(sum(p.numel() for p in model.parameters()))
