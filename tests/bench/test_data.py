"""The real-file pipeline: JPEGs written by `data synth`, decoded, augmented, a corrupt file
skipped and counted."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from PIL import Image

from ringleader.bench.data import Augment, ImageFolder, LoaderStats, batches, scan
from ringleader.errors import UsageError

from .conftest import cli


def test_synth_writes_real_jpegs(tmp_path: Path) -> None:
    proc = cli("data", "synth", "--out", str(tmp_path / "d"), "--images", "6", "--size", "40",
               "--classes", "2", "--seed", "3")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    files = sorted((tmp_path / "d").rglob("*.jpg"))
    assert len(files) == 6 and {f.parent.name for f in files} == {"class_000", "class_001"}
    with Image.open(files[0]) as im:
        assert im.format == "JPEG" and im.size == (40, 40)


@pytest.mark.parametrize("level", ["simple", "standard", "complex"])
def test_augment_levels_give_the_requested_shape(jpeg_dir: Path, level: str) -> None:
    path = next((jpeg_dir / "class_000").glob("img_*.jpg"))
    with Image.open(path) as im:
        arr = Augment(32, level)(im.convert("RGB"), random.Random(0))
    assert arr.shape == (3, 32, 32) and arr.min() >= -1.0 and arr.max() <= 1.0
    with Image.open(path) as im:
        gray = Augment(28, level, channels=1)(im.convert("RGB"), random.Random(0))
    assert gray.shape == (1, 28, 28)


def test_loader_skips_and_counts_the_corrupt_file(jpeg_dir: Path) -> None:
    ds = ImageFolder(str(jpeg_dir), Augment(24))
    assert len(ds) == 25 and ds.classes == ["class_000", "class_001", "class_002"]
    stats = LoaderStats()
    it = batches(ds, batch_size=5, workers=2, stats=stats)
    seen = sum(len(next(it)[1]) for _ in range(5))  # one epoch: 24 good images
    assert seen == 24 and stats.skipped == 1 and stats.images == 24
    images, labels = next(it)
    assert images.shape[1:] == (3, 24, 24) and int(labels.max()) <= 2


def test_empty_folder_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "cls").mkdir()
    with pytest.raises(UsageError, match="no images"):
        scan(tmp_path)


def test_fast_decode_is_jpegs_fast_integer_dct_at_full_size(jpeg_dir: Path) -> None:
    """--decode fast (the DLI lab's INTEGER_FAST, the decode its pipeline exercise slows down):
    the same images at full size, decoded with libjpeg's fastest DCT, so their pixels differ a
    little from the accurate decode's; a corrupt file is skipped either way."""
    accurate, fast = (ImageFolder(str(jpeg_dir), Augment(48, "simple"), decode=d) for d in ("accurate", "fast"))
    seen = 0
    for i in range(len(accurate)):
        a, f = accurate.decoded(i), fast.decoded(i)
        assert (a is None) == (f is None)
        if a is not None and f is not None:
            assert a.size == f.size == (48, 48)
            seen += a.tobytes() != f.tobytes()
    assert seen > 0
    with pytest.raises(UsageError, match="--decode"):
        ImageFolder(str(jpeg_dir), Augment(48), decode="slowest")
