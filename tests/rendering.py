"""Open an HTML report in headless Chromium: every image must load, and a screenshot goes to
the artifacts folder ($RINGLEADER_ARTIFACTS, default artifacts/ at the repository root) for CI
to keep. Skips, saying why, where no Chromium is installed (`make setup` installs it as root)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Appended to a copy of the report only (the report itself has no script): counts the images
# that did not decode once the page has loaded.
IMAGE_CHECK = """<script>window.addEventListener("load", () => {
  const imgs = [...document.images];
  const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  const p = document.createElement("pre"); p.id = "image-check";
  p.textContent = `images=${imgs.length} broken=${broken}`; document.body.appendChild(p);
});</script>"""


def chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium installed (apt-get install chromium, or `make setup` as root)")


def artifacts_dir() -> Path:
    path = Path(os.environ.get("RINGLEADER_ARTIFACTS", REPO / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as profile:
        argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--user-data-dir={profile}", *args]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def check_in_chromium(report: Path, images: int, shot: str) -> Path:
    """Load ``report``; assert ``images`` images, none broken; screenshot it to artifacts/``shot``."""
    browser = chromium()
    probe = report.with_name(report.stem + ".probe.html")
    probe.write_text(report.read_text() + IMAGE_CHECK)
    dom = _run(browser, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    probe.unlink()
    found = re.search(r"images=(\d+) broken=(\d+)", dom.stdout)
    assert found, f"the page did not load: rc={dom.returncode}\n{dom.stderr[-2000:]}"
    assert (int(found.group(1)), int(found.group(2))) == (images, 0), found.group(0)
    out = artifacts_dir() / shot
    out.unlink(missing_ok=True)
    done = _run(browser, "--window-size=1400,2400", f"--screenshot={out}", report.as_uri())
    assert out.is_file() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr[-2000:]
    assert out.stat().st_size > 20_000  # a rendered page, not a blank one
    return out
