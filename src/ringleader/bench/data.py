"""Real-file input pipeline: an image folder of JPEGs (one subfolder per class), decoded with
Pillow and augmented as tf_cnn_benchmarks / the DLI lab do, loaded by N worker processes with
prefetch (and pinned memory on a GPU). Unreadable files are skipped and counted, not fatal.

Augment levels (the DLI lab's variants): ``standard`` = random resized crop, colour distortion
(brightness, saturation, hue, contrast) and a random horizontal flip; ``complex`` adds a random
vertical flip; ``simple`` drops the horizontal flip.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.errors import UsageError

AUGMENTS = ("simple", "standard", "complex")
# JPEG decode: libjpeg's exact integer DCT (Pillow's default) or its fastest (the DLI lab's
# pipeline decodes with INTEGER_FAST; its "suboptimal JPEG decoding" exercise is the other).
DECODES = ("accurate", "fast")
EXTENSIONS = (".jpg", ".jpeg", ".png")
# tf_cnn_benchmarks distort_color bounds (preprocessing.py).
BRIGHTNESS_DELTA = 32.0 / 255.0
SATURATION = (0.5, 1.5)
HUE_DELTA = 0.2
CONTRAST = (0.5, 1.5)


def scan(root: str | os.PathLike[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """(path, label) for every image under ``root``'s class subfolders, and the class names."""
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"data directory {str(root)!r} does not exist",
                         "pass --data synthetic or a folder of class subfolders of JPEGs")
    classes = sorted(d.name for d in base.iterdir() if d.is_dir())
    items = []
    for label, name in enumerate(classes):
        for f in sorted((base / name).iterdir()):
            if f.suffix.lower() in EXTENSIONS and f.is_file():
                items.append((str(f), label))
    if not items:
        raise UsageError(
            f"no images under {str(root)!r} (expected <dir>/<class>/*.jpg)",
            "point --data at a folder of class subfolders of JPEG files, or create one with "
            "`ringleader data synth --out DIR`",
        )
    return items, classes


def check_decode(decode: str) -> None:
    if decode not in DECODES:
        raise UsageError(f"unknown --decode {decode!r}",
                         "use fast (libjpeg's fastest DCT) or accurate (its exact one, the default)")  # fmt: skip


@dataclass
class Augment:
    size: int
    level: str = "standard"
    channels: int = 3

    def __call__(self, img: Any, rng: random.Random) -> Any:
        import numpy as np
        from PIL import Image

        img = _random_resized_crop(img, self.size, rng)
        if self.level != "simple" and rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.level == "complex" and rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
        if self.channels == 1:
            arr = np.asarray(img.convert("L"), dtype=np.float32)[None] / 255.0
        else:
            arr = _distort_color(img, rng).transpose(2, 0, 1)
        return np.ascontiguousarray(arr * 2.0 - 1.0, dtype=np.float32)


def _random_resized_crop(img: Any, size: int, rng: random.Random) -> Any:
    """torchvision's RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3), bilinear resize."""
    from PIL import Image

    w, h = img.size
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            return img.resize((size, size), Image.Resampling.BILINEAR, box=(x, y, x + cw, y + ch))
    side = min(w, h)
    x, y = (w - side) // 2, (h - side) // 2
    return img.resize((size, size), Image.Resampling.BILINEAR, box=(x, y, x + side, y + side))


def _distort_color(img: Any, rng: random.Random) -> Any:
    """Brightness, saturation, hue, contrast in tf_cnn_benchmarks' order; HWC float in [0,1]."""
    import numpy as np
    from PIL import Image

    hsv = np.asarray(img.convert("HSV")).copy()
    hsv[..., 0] += np.uint8(int(rng.uniform(-HUE_DELTA, HUE_DELTA) * 255) % 256)  # hue wraps
    arr = np.asarray(Image.fromarray(hsv, "HSV").convert("RGB"), dtype=np.float32) / 255.0
    arr += rng.uniform(-BRIGHTNESS_DELTA, BRIGHTNESS_DELTA)
    gray = arr @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    arr = gray[..., None] + (arr - gray[..., None]) * rng.uniform(*SATURATION)
    mean = arr.mean(axis=(0, 1), keepdims=True)
    arr = (arr - mean) * rng.uniform(*CONTRAST) + mean
    return np.clip(arr, 0.0, 1.0)


class ImageFolder:
    """Map-style dataset (what torch's DataLoader takes) over ``scan(root)``, sharded by rank.
    ``__getitem__`` returns (CHW float32 array, label), or None for a file that fails to decode."""

    def __init__(self, root: str, augment: Augment, rank: int = 0, world: int = 1,
                 seed: int = 0, decode: str = "accurate") -> None:  # fmt: skip
        check_decode(decode)
        items, self.classes = scan(root)
        self.items = items[rank::world] or items[:1]
        self.augment = augment
        self.seed = seed
        self.decode = decode

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, int] | None:
        import torch

        label = self.items[i][1]

        # Reproducible with --seed: inside a loader process torch.initial_seed() is the loader's
        # base seed (drawn from the seeded main process) plus the worker id, and batches go to
        # workers in a fixed order. (Loader processes persist, so an image gets the same
        # augmentation each epoch: the throughput measured is the same.)
        rng = random.Random(hash((self.seed, i, torch.initial_seed())))
        img = self.decoded(i)
        return None if img is None else (self.augment(img, rng), label)

    def decoded(self, i: int) -> Any:
        """Image ``i`` decoded to RGB, or None for a file that fails to decode."""
        from PIL import Image

        try:
            with Image.open(self.items[i][0]) as im:
                if self.decode == "fast" and im.format == "JPEG":
                    # The JPEG decoder's (scale, draft) arguments: scale 1, draft on, which
                    # makes libjpeg use its fastest DCT (JDCT_FASTEST), as decode_jpeg's
                    # INTEGER_FAST. Image.draft() no longer sets draft; a test checks that the
                    # pixels still differ from the exact decode's.
                    im.decoderconfig = (1, 1)
                return im.convert("RGB")  # forces the decode: a corrupt file fails here
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            return None


def collate(batch: list[tuple[Any, int] | None]) -> tuple[Any, Any, int]:
    """Stack the decodable samples; the third element counts the skipped ones."""
    import numpy as np
    import torch

    good = [b for b in batch if b is not None]
    skipped = len(batch) - len(good)
    if not good:
        return torch.empty(0), torch.empty(0, dtype=torch.int64), skipped
    images = torch.from_numpy(np.stack([g[0] for g in good]))
    labels = torch.tensor([g[1] for g in good], dtype=torch.int64)
    return images, labels, skipped


@dataclass
class LoaderStats:
    images: int = 0
    skipped: int = 0


def batches(ds: ImageFolder, batch_size: int, workers: int, *, prefetch: int = 2,
            pin: bool = False, stats: LoaderStats | None = None) -> Iterator[tuple[Any, Any]]:
    """Endless (images, labels) batches, reshuffled every epoch; counts into ``stats``."""
    from torch.utils.data import DataLoader

    loader: Any = DataLoader(
        ds, batch_size=batch_size, shuffle=True, num_workers=workers, collate_fn=collate,  # type: ignore[arg-type]
        pin_memory=pin, drop_last=False, persistent_workers=workers > 0,
        prefetch_factor=prefetch if workers > 0 else None,
    )  # fmt: skip
    stats = stats if stats is not None else LoaderStats()
    while True:
        for images, labels, skipped in loader:
            stats.skipped += skipped
            if len(labels):
                stats.images += len(labels)
                yield images, labels


def synth(out: str, images: int, size: int = 352, classes: int = 10, seed: int = 0,
          quality: int = 90, on_image: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Write ``images`` real JPEG files (``size`` x ``size``) into ``out``/class_NNN/;
    ``on_image`` hears each one as it starts (a progress bar)."""
    import numpy as np
    from PIL import Image, ImageDraw  # first: a base install lacks it, and its extra (bench) brings numpy too

    if images < 1 or classes < 1 or size < 8:
        raise UsageError("need --images >= 1, --classes >= 1 and --size >= 8",
                         "pass e.g. --images 256 --size 352 --classes 8")
    rng = np.random.default_rng(seed)
    base = Path(out)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    total = 0
    for i in range(images):
        if on_image:
            on_image(f"image {i + 1}/{images}")
        label = i % classes
        folder = base / f"class_{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        tint = (np.array([label * 37 % 256, label * 91 % 256, label * 53 % 256]) / 255.0)
        a, b = rng.uniform(-1, 1, 2)
        field = 0.5 + 0.25 * np.sin(6.0 * (a * xx + b * yy) + rng.uniform(0, 6.28))
        arr = field[..., None] * 0.6 + tint * 0.4 + rng.normal(0, 0.05, (size, size, 3))
        img = Image.fromarray((np.clip(arr, 0, 1) * 255).astype(np.uint8), "RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(3):
            x0, y0 = rng.integers(0, size, 2)
            r = int(rng.integers(size // 16, size // 4))
            color = tuple(int(c) for c in rng.integers(0, 256, 3))
            draw.ellipse([int(x0) - r, int(y0) - r, int(x0) + r, int(y0) + r], fill=color)
        path = folder / f"img_{i:06d}.jpg"
        img.save(path, "JPEG", quality=quality)
        total += path.stat().st_size
    return {"out": str(base), "images": images, "classes": classes, "size": size,
            "bytes": total}  # fmt: skip
