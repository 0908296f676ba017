#!/usr/bin/env python3
"""Draws the Studio's application icon with the standard library only: a 3x3 lattice of
devices coloured by pipeline stage, one tensor-parallel group outlined, as the Plan view's
canvas draws them. Run it after changing the design; it writes resources/icons/lattice.png
(256x256, embedded in the Studio and installed) and lattice-128.png, lattice-48.png (installed
in the hicolor icon theme). `make_icon.py OUT [SIZE]` writes one PNG of SIZE (default 256)."""
import math
import struct
import sys
import zlib

DESIGN, SS = 256, 4  # the design's coordinate grid, supersampling factor per axis


def rounded(x0, y0, x1, y1, r):
    def inside(x, y):
        if not (x0 <= x <= x1 and y0 <= y <= y1):
            return False
        cx = min(max(x, x0 + r), x1 - r)
        cy = min(max(y, y0 + r), y1 - r)
        return (x - cx) ** 2 + (y - cy) ** 2 <= r * r
    return inside


def ring(outer, inner):
    return lambda x, y: outer(x, y) and not inner(x, y)


BACKGROUND = (0x1e, 0x2a, 0x3a)
STAGES = [(0xa6, 0xce, 0xe3), (0xb2, 0xdf, 0x8a), (0xfd, 0xbf, 0x6f)]
OUTLINE = (0xe6, 0x51, 0x00)

shapes = [(rounded(8, 8, 248, 248, 44), BACKGROUND)]
cell, gap, origin = 56, 16, 28
for row in range(3):
    for col in range(3):
        x0 = origin + col * (cell + gap)
        y0 = origin + row * (cell + gap)
        shapes.append((rounded(x0, y0, x0 + cell, y0 + cell, 12), STAGES[row]))
# The first row's first two devices: one TP group.
g0, g1 = origin - 8, origin + 2 * cell + gap + 8
shapes.append((ring(rounded(g0, g0, g1, origin + cell + 8, 18),
                    rounded(g0 + 5, g0 + 5, g1 - 5, origin + cell + 3, 13)), OUTLINE))


def render(size):
    """The icon as PNG bytes, size x size pixels, drawn from the 256-unit design."""
    scale = DESIGN / size
    ss = SS * math.ceil(scale)  # samples per axis: as many per design unit at every size
    rows = []
    for y in range(size):
        line = bytearray([0])  # filter type 0
        for x in range(size):
            acc = [0, 0, 0, 0]
            for sy in range(ss):
                for sx in range(ss):
                    px, py = (x + (sx + 0.5) / ss) * scale, (y + (sy + 0.5) / ss) * scale
                    colour = None
                    for inside, c in shapes:
                        if inside(px, py):
                            colour = c
                    if colour:
                        acc[0] += colour[0]
                        acc[1] += colour[1]
                        acc[2] += colour[2]
                        acc[3] += 255
            n = ss * ss
            alpha = acc[3] / n
            if alpha > 0:
                line += bytes([round(acc[0] * 255 / acc[3]), round(acc[1] * 255 / acc[3]),
                               round(acc[2] * 255 / acc[3]), round(alpha)])
            else:
                line += bytes(4)
        rows.append(bytes(line))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0))
    return png + chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def write(path, size):
    with open(path, "wb") as f:
        f.write(render(size))


if len(sys.argv) > 1:
    write(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else DESIGN)
else:
    here = __file__.rsplit("/", 1)[0]
    write(here + "/lattice.png", 256)
    write(here + "/lattice-128.png", 128)
    write(here + "/lattice-48.png", 48)
