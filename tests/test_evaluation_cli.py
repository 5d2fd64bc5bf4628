"""``fedgs evaluate`` and ``fedgs report`` end to end, and the report rendered by Chromium.

The render test loads the page in headless Chromium (Debian's package; .ci/run installs it) with
a probe script appended to a copy of the page, which records how many <img> elements decoded.
A copy with one corrupted image must fail the same probe, so the check can fail.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from evaluation_runs import make_run

from fedgs.cli import main
from fedgs.metrics import controls as controls_module

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_PROBE = """<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const broken = images.filter((i) => !(i.complete && i.naturalWidth > 0)).length;
  document.body.setAttribute("data-probe", images.length + ":" + broken);
});
</script></body>"""


def _rendered_images(page: Path, tmp_path: Path) -> tuple[int, int]:
    """(images, images that failed to decode) in the page as Chromium loaded it."""
    probed = page.with_name(page.stem + "-probe.html")
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE), "utf-8")
    profile = tmp_path / f"chromium-profile-{page.stem}"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probed.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    found = re.search(r'data-probe="(\d+):(\d+)"', done.stdout)
    assert found, f"Chromium gave no probe result (rc {done.returncode}): {done.stderr[-2000:]}"
    return int(found[1]), int(found[2])


def test_evaluate_without_generator_exits_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert main(["evaluate", str(tmp_path)]) == 2
    assert "no generator.pt" in capsys.readouterr().err
    assert main(["evaluate", str(tmp_path / "nowhere")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_report_is_self_contained(tmp_path: Path) -> None:
    runs = [make_run(tmp_path / "gswgan", "simulate"), make_run(tmp_path / "fedavg", "fedavg-gan")]
    out = tmp_path / "report.html"
    assert main(["report", *map(str, runs), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<h2>Comparison</h2>" in page and page.count('<section class="run">') == 2
    for threat_model in ("untrusted-server", "trusted-sampler", "trusted-server", "paper"):
        assert threat_model in page
    sources = re.findall(r'<img[^>]* src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r'(src|href)="(https?:|file:|/)', page)  # nothing outside the page
    assert "gswgan: not drawn, no fedgs evaluate output." in page  # no evaluation: no curve
    assert not (tmp_path / "report_files" / "privacy_utility.csv").exists()


@pytest.mark.slow
def test_evaluate_then_report_renders_in_chromium(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controls_module, "PUBLIC_FONT_IMAGES", 200)  # rendered in seconds
    run = make_run(tmp_path / "run", "simulate")
    args = [
        "evaluate",
        str(run),
        "--samples",
        "200",
        "--classifiers",
        "mlp",
        "gaussian-nb",
        "--epochs",
        "1",
        "--score-samples",
        "200",
        "--grad-norm-samples",
        "32",
    ]
    assert main(args) == 0
    evaluation = run / "evaluation"
    summary = json.loads((evaluation / "summary.json").read_text())
    assert [r["classifier"] for r in summary["utility"]] == ["mlp", "gaussian-nb"]
    assert summary["scores"]["num_samples"] == 200
    quality = summary["quality"]
    assert [r["name"] for r in quality["controls"]] == [
        "real training writers",
        "lookup k=1",
        "lookup k=5",
        "public fonts",
        "untrained generator",
        "flat grey",
    ]
    assert "held-out" in quality["instrument"]["split"]["evaluation_images"]
    assert quality["run"]["near_copy_share"] <= 1.0 and "coverage" in quality["run"]
    for name in (
        "utility.csv",
        "utility.md",
        "plots/training_curves.png",
        "plots/training_curves.csv",
        "plots/gradient_norms.png",
        "plots/gradient_norms.csv",
        "plots/closest_pairs.png",
        "quality.md",
    ):
        assert (evaluation / name).stat().st_size > 0, name
    assert main(args) == 0  # again, from the cache
    assert json.loads((evaluation / "summary.json").read_text())["utility"] == summary["utility"]

    out = tmp_path / "report.html"
    assert main(["report", str(run), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "Downstream utility" in page and "gradient norms" in page
    assert "Quality (evaluation writers only" in page and "memorisation check" in page
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/run installs Debian's package)")
    images, broken = _rendered_images(out, tmp_path)
    assert images == page.count("<img") >= 3 and broken == 0
    corrupted = tmp_path / "corrupted.html"
    corrupted.write_text(page.replace("base64,iVBOR", "base64,AAAA", 1), encoding="utf-8")
    assert _rendered_images(corrupted, tmp_path) == (images, 1)
