#!/usr/bin/env python3
"""Draws resources/icons/lattice.png (256x256), the Studio's application icon, with the
standard library only: a 3x3 lattice of devices coloured by pipeline stage, one tensor-parallel
group outlined, as the Plan view's canvas draws them. Run it after changing the design."""
import struct
import sys
import zlib

SIZE, SS = 256, 4  # output size, supersampling factor per axis


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

rows = []
for y in range(SIZE):
    line = bytearray([0])  # filter type 0
    for x in range(SIZE):
        acc = [0, 0, 0, 0]
        for sy in range(SS):
            for sx in range(SS):
                px, py = x + (sx + 0.5) / SS, y + (sy + 0.5) / SS
                colour = None
                for inside, c in shapes:
                    if inside(px, py):
                        colour = c
                if colour:
                    acc[0] += colour[0]
                    acc[1] += colour[1]
                    acc[2] += colour[2]
                    acc[3] += 255
        n = SS * SS
        alpha = acc[3] / n
        if alpha > 0:
            line += bytes([round(acc[0] * 255 / acc[3]), round(acc[1] * 255 / acc[3]),
                           round(acc[2] * 255 / acc[3]), round(alpha)])
        else:
            line += bytes(4)
    rows.append(bytes(line))


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0))
png += chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")
out = sys.argv[1] if len(sys.argv) > 1 else __file__.rsplit("/", 1)[0] + "/lattice.png"
with open(out, "wb") as f:
    f.write(png)
