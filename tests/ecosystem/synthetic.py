"""Inputs the drivers make offline, the same in every process: text images drawn with a
font Pillow ships, shapes, speech-like audio, small files of known types.

Everything is seeded; :func:`digest` hashes what a driver fed the library so the report can
check that both runs saw the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SEED = 20240611


def font(size: int) -> ImageFont.FreeTypeFont:
    """Pillow's bundled scalable font (Pillow >= 10.1 with FreeType): present wherever
    Pillow is, so the images do not depend on the machine's fonts."""
    loaded = ImageFont.load_default(size=size)
    if not isinstance(loaded, ImageFont.FreeTypeFont):
        raise RuntimeError("Pillow was built without FreeType: no scalable default font to draw text")
    return loaded


def text_image(lines: list[str], size: int = 40, pad: int = 24, line_gap: int = 18,
               noise: float = 0.0, background: int = 255, ink: int = 0) -> Image.Image:
    """Black text lines on white (RGB), optionally with seeded pixel noise."""
    typeface = font(size)
    boxes = [typeface.getbbox(line) for line in lines]
    width = max(b[2] for b in boxes) + 2 * pad
    height = sum(b[3] for b in boxes) + line_gap * (len(lines) - 1) + 2 * pad
    image = Image.new("RGB", (width, height), (background,) * 3)
    draw = ImageDraw.Draw(image)
    y = pad
    for line, box in zip(lines, boxes):
        draw.text((pad, y), line, font=typeface, fill=(ink,) * 3)
        y += box[3] + line_gap
    if noise:
        rng = np.random.default_rng(SEED)
        pixels = np.asarray(image, dtype=np.float32) + rng.normal(0, noise, (height, width, 1))
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return image


def captcha_image(text: str, size: tuple[int, int] = (160, 60)) -> Image.Image:
    """A captcha-like image: coloured characters at seeded offsets over light noise and
    a few lines."""
    rng = np.random.default_rng(SEED)
    background = rng.integers(215, 255, (size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(background)
    draw = ImageDraw.Draw(image)
    typeface = font(34)
    x = 10
    for char in text:
        colour = tuple(int(c) for c in rng.integers(0, 110, 3))
        draw.text((x, 8 + int(rng.integers(-4, 5))), char, font=typeface, fill=colour)
        x += typeface.getbbox(char)[2] + 4
    for _ in range(3):
        points = [tuple(int(v) for v in rng.integers(0, s, 2)) for s in (size, size)]
        draw.line([(points[0][0], points[0][1] % size[1]), (points[1][0], points[1][1] % size[1])],
                  fill=(150, 150, 150), width=1)
    return image


def shapes_image(size: tuple[int, int] = (640, 480)) -> Image.Image:
    """Filled and outlined shapes on a gradient: something for detectors to look at."""
    rng = np.random.default_rng(SEED)
    w, h = size
    gradient = np.linspace(40, 200, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
    image = Image.fromarray(gradient.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, w * 7 // 8)), int(rng.integers(0, h * 7 // 8))
        x1, y1 = x0 + int(rng.integers(w // 20, w // 3)), y0 + int(rng.integers(h // 20, h // 3))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        else:
            draw.rectangle((x0, y0, x1, y1), outline=colour, width=max(1, w // 160))
    return image


def figure_image(size: int = 480) -> Image.Image:
    """A crude cartoon person (head with hair and eyes, torso, arms, shorts, legs), softly
    blurred: body-part detectors fire on it with confidences well inside (0.3, 0.8)."""
    skin = (230, 185, 155)
    image = Image.new("RGB", (size, size), (120, 140, 150))
    draw = ImageDraw.Draw(image)
    c = size // 2
    draw.ellipse((c - 50, 20, c + 50, 140), fill=skin)
    draw.chord((c - 54, 10, c + 54, 100), 180, 360, fill=(60, 40, 25))
    for dx in (-20, 20):
        draw.ellipse((c + dx - 8, 70, c + dx + 8, 80), fill=(40, 30, 20))
    draw.arc((c - 20, 100, c + 20, 120), 10, 170, fill=(150, 60, 60), width=3)
    draw.rectangle((c - 15, 135, c + 15, 160), fill=skin)
    draw.polygon([(c - 90, 160), (c + 90, 160), (c + 70, 330), (c - 70, 330)], fill=skin)
    draw.ellipse((c - 8, 260, c + 8, 276), fill=(190, 140, 110))
    draw.polygon([(c - 90, 160), (c - 130, 320), (c - 110, 325), (c - 70, 190)], fill=skin)
    draw.polygon([(c + 90, 160), (c + 130, 320), (c + 110, 325), (c + 70, 190)], fill=skin)
    draw.rectangle((c - 70, 330, c + 70, 400), fill=(30, 50, 120))
    draw.rectangle((c - 65, 400, c - 15, 470), fill=skin)
    draw.rectangle((c + 15, 400, c + 65, 470), fill=skin)
    return image.filter(ImageFilter.GaussianBlur(3))


def face_image(size: int = 480) -> Image.Image:
    """A drawn face (skin-toned oval, eyes, brows, nose, mouth, hair) above a shirt."""
    image = Image.new("RGB", (size, size), (200, 220, 235))
    draw = ImageDraw.Draw(image)
    c = size // 2
    draw.rectangle((c - 150, int(size * 0.78), c + 150, size), fill=(60, 90, 160))  # shirt
    draw.rectangle((c - 35, int(size * 0.62), c + 35, int(size * 0.8)), fill=(225, 180, 150))  # neck
    draw.ellipse((c - 110, 60, c + 110, 360), fill=(230, 185, 155))  # face
    draw.chord((c - 118, 40, c + 118, 240), 180, 360, fill=(70, 45, 30))  # hair
    for dx in (-45, 45):
        draw.ellipse((c + dx - 22, 170, c + dx + 22, 196), fill=(255, 255, 255))
        draw.ellipse((c + dx - 9, 174, c + dx + 9, 192), fill=(60, 40, 30))
        draw.line((c + dx - 25, 155, c + dx + 25, 150), fill=(60, 40, 30), width=5)
    draw.polygon([(c, 200), (c - 15, 255), (c + 15, 255)], fill=(205, 150, 125))
    draw.arc((c - 45, 260, c + 45, 310), 10, 170, fill=(160, 60, 60), width=6)
    return image


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def speech_like(seconds: float, rate: int = 16000, segments: tuple[tuple[float, float], ...] = ()) -> np.ndarray:
    """float32 mono audio: low noise everywhere, and in each (start, end) segment a voiced
    source-filter signal (a glottal pulse train at a wandering pitch through vowel formants,
    syllable-rate amplitude modulation)."""
    rng = np.random.default_rng(SEED)
    n = int(seconds * rate)
    audio = rng.normal(0, 0.002, n).astype(np.float64)
    t = np.arange(n) / rate
    vowels = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410)]
    for start, end in segments:
        i0, i1 = int(start * rate), int(end * rate)
        tt = t[i0:i1] - start
        pitch = 130 + 25 * np.sin(2 * np.pi * 0.7 * tt) + 10 * np.sin(2 * np.pi * 3.1 * tt)
        phase = 2 * np.pi * np.cumsum(pitch) / rate
        source = np.zeros_like(tt)
        for k in range(1, 30):  # band-limited sawtooth-like glottal source
            source += np.sin(k * phase) / k
        voiced = np.zeros_like(tt)
        syllable = int(0.25 * rate)
        for j, s in enumerate(range(0, len(tt), syllable)):
            chunk = source[s:s + syllable]
            formants = vowels[(j + i0) % len(vowels)]
            spectrum = np.fft.rfft(chunk)
            freqs = np.fft.rfftfreq(len(chunk), 1 / rate)
            envelope = sum(1.0 / (1 + ((freqs - f) / (60 + 0.06 * f)) ** 2) for f in formants)
            voiced[s:s + syllable] = np.fft.irfft(spectrum * envelope, len(chunk))
        modulation = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * tt - np.pi / 2)
        voiced *= modulation * np.hanning(len(tt)) ** 0.1
        audio[i0:i1] += 0.3 * voiced / (np.abs(voiced).max() + 1e-9)
    return audio.astype(np.float32)


def tone(seconds: float, rate: int, freqs: tuple[float, ...] = (440.0, 1250.0)) -> np.ndarray:
    """A chord of sines with a little seeded noise (float32, mono)."""
    rng = np.random.default_rng(SEED + 1)
    t = np.arange(int(seconds * rate)) / rate
    signal = sum(np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs)
    return (0.5 * signal + rng.normal(0, 0.01, t.shape)).astype(np.float32)


def sample_files() -> dict[str, bytes]:
    """Small files of known types, keyed by a name that says what each is."""
    rng = np.random.default_rng(SEED)
    files: dict[str, bytes] = {}
    files["python.py"] = (
        b"import argparse\nimport json\nfrom pathlib import Path\n\n\n"
        b"def load(path: Path) -> dict:\n    \"\"\"Read a JSON config.\"\"\"\n"
        b"    with open(path) as f:\n        return json.load(f)\n\n\n"
        b"class Counter:\n    def __init__(self):\n        self.n = 0\n\n"
        b"    def add(self, k=1):\n        self.n += k\n        return self.n\n\n\n"
        b"if __name__ == '__main__':\n    parser = argparse.ArgumentParser()\n"
        b"    parser.add_argument('config')\n    args = parser.parse_args()\n"
        b"    print(load(Path(args.config)))\n"
    )
    files["json.json"] = json.dumps(
        {"name": "sensor", "values": [round(float(v), 4) for v in rng.normal(size=40)],
         "meta": {"unit": "celsius", "ok": True, "tags": ["a", "b", "c"]}}, indent=2).encode()
    files["html.html"] = (
        b"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Report</title>\n"
        b"<link rel=\"stylesheet\" href=\"style.css\">\n</head>\n<body>\n<h1>Quarterly report</h1>\n"
        b"<p>Revenue grew by <b>12%</b> over the quarter.</p>\n<ul>\n<li>North</li>\n<li>South</li>\n</ul>\n"
        b"<table><tr><th>Region</th><th>Sales</th></tr><tr><td>North</td><td>120</td></tr></table>\n"
        b"<script>document.title = 'Report';</script>\n</body>\n</html>\n"
    )
    files["csv.csv"] = ("id,name,score,date\n" + "".join(
        f"{i},user{i},{float(rng.uniform(0, 100)):.2f},2024-0{1 + i % 9}-1{i % 10}\n" for i in range(40))).encode()
    files["c.c"] = (
        b"#include <stdio.h>\n#include <stdlib.h>\n\nstatic int sum(const int *v, size_t n) {\n"
        b"    int s = 0;\n    for (size_t i = 0; i < n; i++) s += v[i];\n    return s;\n}\n\n"
        b"int main(int argc, char **argv) {\n    int v[4] = {1, 2, 3, 4};\n"
        b"    printf(\"%d\\n\", sum(v, 4));\n    return EXIT_SUCCESS;\n}\n"
    )
    files["shell.sh"] = (
        b"#!/bin/bash\nset -euo pipefail\n\nfor f in \"$@\"; do\n  if [ -f \"$f\" ]; then\n"
        b"    echo \"processing $f\"\n    wc -l \"$f\"\n  else\n    echo \"missing: $f\" >&2\n    exit 1\n  fi\ndone\n"
    )
    files["markdown.md"] = (
        b"# Project\n\nA short description of the project.\n\n## Install\n\n```bash\npip install project\n```\n\n"
        b"## Usage\n\n- run `project --help`\n- see the [docs](https://example.org)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    files["xml.xml"] = (
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<catalog>\n" + "".join(
            f"  <book id=\"bk{i}\">\n    <title>Title {i}</title>\n    <price>{10 + i}.95</price>\n  </book>\n"
            for i in range(8)) + "</catalog>\n").encode()
    files["png.png"] = png_bytes(shapes_image((96, 64)))
    jpeg = io.BytesIO()
    shapes_image((96, 64)).save(jpeg, format="JPEG", quality=85)
    files["jpeg.jpg"] = jpeg.getvalue()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in (("readme.txt", b"hello\n" * 50), ("data.csv", files["csv.csv"])):
            # A fixed date: writestr(name, ...) would stamp the current time.
            z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    files["zip.zip"] = archive.getvalue()
    files["pdf.pdf"] = _minimal_pdf("Hello from a synthetic PDF")
    files["random.bin"] = rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()
    return files


def _minimal_pdf(text: str) -> bytes:
    """A valid one-page PDF with a text object and a correct xref table."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{i} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for off in offsets:
        out.write(f"{off:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def digest(*parts: Any) -> str:
    """sha256 over the inputs a driver used (arrays, images, bytes, strings)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Image.Image):
            part = np.asarray(part)
        if isinstance(part, np.ndarray):
            h.update(str((part.dtype, part.shape)).encode())
            part = np.ascontiguousarray(part).tobytes()
        if isinstance(part, str):
            part = part.encode()
        h.update(part)
    return h.hexdigest()[:16]
