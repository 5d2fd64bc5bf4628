"""Digits rendered from fonts that ship with matplotlib: public data, no privacy cost.

Why: a generator that starts from digit shapes needs far fewer private queries than one that
starts from noise (issue 21), and these images come from no person: the DejaVu, STIX and
Computer Modern fonts in matplotlib's ``mpl-data/fonts/ttf`` (not NIST, not any writer).
Each image is one glyph, thinned, rotated, sheared, scaled and shifted at random into the
FEMNIST frame (28x28, ink +1 on background -1, digit about 14-21 px tall, strokes 1-2 px), so
the set has the variety of a handwriting corpus' frame and stroke, not its writers' styles.
Rendering is seeded: the same (count, seed) gives the same images anywhere.
"""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedgs import stopping
from fedgs.data.cache import cache_root

# Text fonts with proper lining digits; symbol fonts (cmex, cmsy, STIXSiz*, STIXNonUni*),
# old-style-figure math italics (cmmi10) and the last-resort font are left out.
FONT_FILES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
    "cmr10.ttf",
    "cmb10.ttf",
    "cmss10.ttf",
    "cmti10.ttf",
    "cmtt10.ttf",
)
NUM_CLASSES = 10
IMAGE_SIZE = 28
_CANVAS = 160  # glyphs are drawn at 64 pt on a large canvas, then thinned and scaled down
_FONT_POINTS = 64
_MIN_INK_PIXELS = 60  # a thinning that leaves less than this is undone
RENDER_VERSION = 1  # bump when the rendering changes: cached sets are keyed by it


def font_paths() -> list[Path]:
    """The font files used, from the installed matplotlib; an error names any that is missing."""
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    missing = [name for name in FONT_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"matplotlib fonts missing in {folder}: {', '.join(missing)}")
    return [folder / name for name in FONT_FILES]


@cache
def _font(path: Path):
    from PIL import ImageFont

    return ImageFont.truetype(str(path), _FONT_POINTS)


def _glyph(path: Path, digit: int, rng: np.random.Generator) -> np.ndarray:
    """One digit, thinned by a random erosion, rotated and sheared; values in [0, 1]."""
    from PIL import Image, ImageDraw, ImageFilter

    image = Image.new("L", (_CANVAS, _CANVAS), 0)
    ImageDraw.Draw(image).text((40, 30), str(digit), fill=255, font=_font(path))
    thinned = image.filter(ImageFilter.MinFilter(int(rng.choice((3, 5, 7)))))
    if (np.asarray(thinned) > 128).sum() > _MIN_INK_PIXELS:
        image = thinned
    centre = (_CANVAS / 2, _CANVAS / 2)
    image = image.rotate(rng.uniform(-15, 15), resample=Image.BILINEAR, center=centre)
    shear = rng.uniform(-0.3, 0.3)
    image = image.transform(
        image.size, Image.AFFINE, (1, shear, -shear * centre[0], 0, 1, 0), Image.BILINEAR
    )
    return np.asarray(image, dtype=np.float32) / 255.0


def _framed(glyph: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """The glyph's bounding box scaled to 14-21 px high and placed near the frame's centre."""
    rows, cols = np.nonzero(glyph > 0.1)
    crop = torch.from_numpy(glyph[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1])
    height, width = crop.shape
    scale = rng.uniform(14, 21) / height
    size = (
        min(IMAGE_SIZE - 2, max(1, round(height * scale))),
        min(IMAGE_SIZE - 2, max(1, round(width * scale * rng.uniform(0.8, 1.15)))),
    )
    small = F.interpolate(crop[None, None], size=size, mode="area")[0, 0]
    frame = torch.zeros(IMAGE_SIZE, IMAGE_SIZE)
    top, left = (
        int(np.clip((IMAGE_SIZE - s) // 2 + rng.integers(-2, 3), 0, IMAGE_SIZE - s)) for s in size
    )
    frame[top : top + size[0], left : left + size[1]] = small
    return frame


def render_digits(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` font digits with balanced labels: images (count, 1, 28, 28) in [-1, 1] with ink
    at +1 (the FEMNIST convention) and int64 labels."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    fonts = font_paths()
    rng = np.random.default_rng(seed)
    labels = torch.arange(count) % NUM_CLASSES
    images = torch.empty(count, 1, IMAGE_SIZE, IMAGE_SIZE)
    for i, digit in enumerate(labels.tolist()):
        stopping.check("stopped while rendering the public digits")  # ~6 ms per image
        glyph = _glyph(fonts[int(rng.integers(len(fonts)))], digit, rng)
        images[i, 0] = _framed(glyph, rng) * 2.0 - 1.0
    return images, labels


def cached_digits(
    count: int, seed: int = 0, cache_dir: str | Path | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`render_digits`, stored once under the fedgs cache (rendering 10,000 takes about a
    minute on one core); the file is written atomically, so a crash leaves no partial set."""
    path = cache_root(cache_dir) / f"public_digits-v{RENDER_VERSION}-{count}-{seed}.pt"
    if path.is_file():
        images, labels = torch.load(path)
        return images, labels
    images, labels = render_digits(count, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(handle)
    torch.save((images, labels), temporary)
    os.replace(temporary, path)
    return images, labels
