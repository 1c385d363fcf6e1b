"""The report as a person sees it: headless Chromium opens the HTML offline, every figure has loaded
(naturalWidth > 0, read back from the rendered DOM), and a full-page screenshot is not blank."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trainsim.cli.main import main

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="headless chromium not installed (apt-get install chromium)"),
]

# Injected into a copy of the report (the report itself has no scripts): after load, list each image's
# natural size and completion in an element that --dump-dom prints.
PROBE = """
<script>
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('img').forEach(function (im) {
    out.push([im.alt, im.complete, im.naturalWidth, im.naturalHeight].join('|'));
  });
  var pre = document.createElement('pre');
  pre.id = 'imgprobe';
  pre.textContent = 'IMAGES ' + out.length + '\\n' + out.join('\\n');
  document.body.appendChild(pre);
});
</script>
"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--virtual-time-budget=10000"]


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / "chrome-profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser-report")
    measured = Path(__file__).parent / "data" / "report" / "execute-tiny-gpt-cpu.json"
    assert main(["report", str(ROOT / "examples" / "tiny-gpt-cpu.yaml"), "--measured", str(measured),
                 "--out", str(out)]) == 0
    return out


@pytest.mark.timeout(300)
def test_every_image_loads_in_chromium(report_dir, tmp_path):
    # Render the copy from a directory with nothing else in it: the page must not need figures/ or network.
    isolated = tmp_path / "isolated"
    isolated.mkdir()
    html = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "<script" not in html
    (isolated / "probe.html").write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    res = chromium(tmp_path, "--dump-dom", (isolated / "probe.html").as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    assert "IMAGES " in dom, dom[-2000:]
    block = dom.split('<pre id="imgprobe">', 1)[1].split("</pre>", 1)[0]
    lines = block.strip().splitlines()
    count = int(lines[0].split()[1])
    rows = [ln.split("|") for ln in lines[1:]]
    assert count == len(rows) >= 7          # timeline, memory, MFU map, scaling, goodput, 2 x measured
    for alt, complete, w, h in rows:
        assert complete == "true" and int(w) >= 300 and int(h) >= 200, (alt, complete, w, h)


@pytest.mark.timeout(300)
def test_screenshot_is_not_blank(report_dir, tmp_path):
    shot = tmp_path / "report.png"
    res = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,4000", (report_dir / "index.html").as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(shot)
    assert img.shape[0] == 4000 and img.shape[1] == 1400
    # A rendered page: many distinct colours (figures), not a uniform blank.
    sample = (img[::8, ::8, :3] * 255).astype(np.uint8).reshape(-1, 3)
    assert len(np.unique(sample, axis=0)) > 200
    keep = os.environ.get("TRAINSIM_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
