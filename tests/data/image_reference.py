#!/usr/bin/python3
"""Independent references for test_image_data (run with /usr/bin/python3: numpy, PyTorch, Pillow).

Writes into DIR:
  png_<case>.png + png_<case>.rgb   PNGs from a pure-Python encoder (zlib + struct, no libpng) of
                                    every colour type and bit depth, and the 8-bit RGB expected
                                    by Note [image decoding] (gray replicated, 16-bit high byte,
                                    palette looked up, alpha dropped), uint8 (H, W, 3)
  pil_rgb.png + .rgb                an RGB PNG written by Pillow
  jpg_<case>.jpg + .pil.rgb + .src.rgb   JPEGs written by Pillow, Pillow's own decode to RGB,
                                    and the pixels that were encoded
  jpg_cmyk.jpg                      a CMYK JPEG (refused)
  png_huge.png                      a PNG header of 200 million pixels (refused)
  resize_<case>.u8 / .f64           input (H, W, 3) uint8 and torch's float64
                                    interpolate(bicubic, align_corners=False, antialias=True)
  pad_<case>.u8 / .rgb              input and LLaVA's expand2square (Pillow) with (122, 116, 104)
  norm.u8 / norm.f64                (S, S, 3) uint8 and its CLIP normalisation (3, S, S) float64
  meta.txt                          one line per case: name H W [OUT_H OUT_W]
"""
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

out = sys.argv[1]
rng = np.random.default_rng(27)
meta = []


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png_bytes(width, height, depth, color_type, rows, palette=None, trns=None, interlace=0):
    """rows: list of bytes, each a packed scanline (filter type 0 is prepended here); with
    interlace=1, the scanlines of the Adam7 passes one after the other."""
    raw = b"".join(b"\x00" + r for r in rows)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth,
                                                             color_type, 0, 0, interlace))
    if palette is not None:
        data += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        data += chunk(b"tRNS", trns)
    return data + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def pack_bits(values, depth):
    """One row of samples < 2^depth packed MSB first (depth 1, 2, 4)."""
    per = 8 // depth
    out_bytes = bytearray()
    for i in range(0, len(values), per):
        b = 0
        group = list(values[i:i + per]) + [0] * (per - len(values[i:i + per]))
        for v in group:
            b = (b << depth) | int(v)
        out_bytes.append(b)
    return bytes(out_bytes)


def save(name, data, expected):
    with open(f"{out}/{name}.png", "wb") as f:
        f.write(data)
    expected.astype(np.uint8).tofile(f"{out}/{name}.rgb")
    meta.append(f"{name} {expected.shape[0]} {expected.shape[1]}")


H, W = 7, 11  # odd sizes: partial bytes at the end of packed rows
for depth in (1, 2, 4, 8, 16):
    g = rng.integers(0, 2 ** depth, size=(H, W))
    if depth < 8:
        rows = [pack_bits(r, depth) for r in g]
        g8 = g * (255 // (2 ** depth - 1))
    elif depth == 8:
        rows = [bytes(r.astype(np.uint8)) for r in g]
        g8 = g
    else:
        rows = [r.astype(">u2").tobytes() for r in g]
        g8 = g >> 8
    save(f"png_gray{depth}", png_bytes(W, H, depth, 0, rows), np.repeat(g8[..., None], 3, axis=2))
for depth in (8, 16):
    for channels, ctype, label in ((3, 2, "rgb"), (4, 6, "rgba"), (2, 4, "graya")):
        v = rng.integers(0, 2 ** depth, size=(H, W, channels))
        rows = [r.astype(">u2" if depth == 16 else np.uint8).tobytes() for r in v]
        v8 = v >> 8 if depth == 16 else v
        colour = v8[..., :3] if channels >= 3 else np.repeat(v8[..., :1], 3, axis=2)
        save(f"png_{label}{depth}", png_bytes(W, H, depth, ctype, rows), colour)
for depth in (4, 8):
    entries = 2 ** depth if depth == 4 else 200
    palette = rng.integers(0, 256, size=(entries, 3))
    idx = rng.integers(0, entries, size=(H, W))
    rows = [pack_bits(r, depth) if depth < 8 else bytes(r.astype(np.uint8)) for r in idx]
    trns = bytes(rng.integers(0, 256, size=entries // 2).astype(np.uint8))  # alpha for half
    save(f"png_palette{depth}", png_bytes(W, H, depth, 3, rows, palette.flatten().tolist(), trns),
         palette[idx])
# Adam7 interlacing, 8-bit RGB: the seven passes' sub-images, each row filtered with type 0.
v = rng.integers(0, 256, size=(H, W, 3)).astype(np.uint8)
adam7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))
rows = [v[y, x0::dx].tobytes() for x0, y0, dx, dy in adam7 if x0 < W for y in range(y0, H, dy)]
save("png_rgb8_interlaced", png_bytes(W, H, 8, 2, rows, interlace=1), v)
# gray with a tRNS colour key: the key is dropped, the gray kept
g = rng.integers(0, 256, size=(H, W))
save("png_gray8_trns", png_bytes(W, H, 8, 0, [bytes(r.astype(np.uint8)) for r in g],
                                 trns=struct.pack(">H", int(g[0, 0]))),
     np.repeat(g[..., None], 3, axis=2))

# A header claiming 20000 x 10000 pixels (over PIL's decompression-bomb limit), no pixel data.
with open(f"{out}/png_huge.png", "wb") as f:
    f.write(png_bytes(20000, 10000, 8, 2, []))

# Pillow's PNG encoder (zlib filters of its own choosing).
v = rng.integers(0, 256, size=(13, 17, 3)).astype(np.uint8)
Image.fromarray(v, "RGB").save(f"{out}/pil_rgb.png")
v.tofile(f"{out}/pil_rgb.rgb")
meta.append("pil_rgb 13 17")

# JPEGs: a smooth picture (JPEG's use) with some edges.
yy, xx = np.mgrid[0:48, 0:40]
smooth = np.stack([128 + 100 * np.sin(xx / 7.0), 128 + 100 * np.cos(yy / 9.0),
                   (xx * 3 + yy * 2) % 256], axis=2).clip(0, 255).astype(np.uint8)
smooth[10:20, 5:15] = (250, 20, 20)
for name, kwargs, mode in (("jpg_q95_444", dict(quality=95, subsampling=0), "RGB"),
                           ("jpg_q75_420", dict(quality=75, subsampling=2), "RGB"),
                           ("jpg_progressive", dict(quality=90, progressive=True), "RGB"),
                           ("jpg_gray", dict(quality=90), "L")):
    img = Image.fromarray(smooth, "RGB")
    if mode == "L":
        img = img.convert("L")
    img.save(f"{out}/{name}.jpg", "JPEG", **kwargs)
    np.asarray(Image.open(f"{out}/{name}.jpg").convert("RGB")).tofile(f"{out}/{name}.pil.rgb")
    np.asarray(img.convert("RGB")).tofile(f"{out}/{name}.src.rgb")
    meta.append(f"{name} 48 40")
Image.fromarray(smooth, "RGB").convert("CMYK").save(f"{out}/jpg_cmyk.jpg", "JPEG", quality=90)

# Resizing: torch's float64 antialiased bicubic (align_corners=False).
for name, (h, w), (oh, ow) in (("resize_down", (37, 37), (16, 16)),
                               ("resize_up", (10, 10), (23, 23)),
                               ("resize_mixed", (30, 18), (13, 29)),
                               ("resize_big", (64, 64), (224, 224))):
    x = rng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
    x.tofile(f"{out}/{name}.u8")
    t = torch.from_numpy(x.astype(np.float64)).permute(2, 0, 1)[None]
    y = F.interpolate(t, size=(oh, ow), mode="bicubic", align_corners=False, antialias=True)
    y[0].permute(1, 2, 0).contiguous().numpy().tofile(f"{out}/{name}.f64")
    meta.append(f"{name} {h} {w} {oh} {ow}")

# LLaVA's expand2square (llava/mm_utils.py) on Pillow images.
def expand2square(pil_img, background_color):
    width, height = pil_img.size
    if width == height:
        return pil_img
    if width > height:
        result = Image.new(pil_img.mode, (width, width), background_color)
        result.paste(pil_img, (0, (width - height) // 2))
        return result
    result = Image.new(pil_img.mode, (height, height), background_color)
    result.paste(pil_img, ((height - width) // 2, 0))
    return result


mean = (0.48145466, 0.4578275, 0.40821073)
std = (0.26862954, 0.26130258, 0.27577711)
colour = tuple(int(x * 255) for x in mean)
for name, (h, w) in (("pad_wide", (5, 12)), ("pad_tall", (9, 4)), ("pad_square", (6, 6))):
    x = rng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
    x.tofile(f"{out}/{name}.u8")
    sq = np.asarray(expand2square(Image.fromarray(x, "RGB"), colour))
    sq.tofile(f"{out}/{name}.rgb")
    meta.append(f"{name} {h} {w} {sq.shape[0]} {sq.shape[1]}")

x = rng.integers(0, 256, size=(8, 8, 3)).astype(np.uint8)
x.tofile(f"{out}/norm.u8")
n = (x.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)
n.transpose(2, 0, 1).copy().tofile(f"{out}/norm.f64")
meta.append("norm 8 8")

with open(f"{out}/meta.txt", "w") as f:
    f.write("\n".join(meta) + "\n")
