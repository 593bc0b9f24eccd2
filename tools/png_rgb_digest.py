#!/usr/bin/env python3
"""An independent decoder of 8-bit, non-interlaced gray/RGB PNGs (zlib + the five PNG filters of the
spec), printing for each file: width, height, the weighted sum sum(v * (i % 65521 + 1)) mod 2^64 over
its RGB bytes (gray replicated), the first two pixels and the last. The expected values of
tests/unit/image/decode_test.cpp (SharedPngsMatchAnIndependentDecoder) come from it:

    python3 tools/png_rgb_digest.py ../shared/data/images/{chelsea,camera,gravel}.png
"""
import struct, sys, zlib
def decode(path):
    b = open(path, 'rb').read()
    assert b[:8] == b'\x89PNG\r\n\x1a\n'
    pos, idat = 8, b''
    while pos < len(b):
        n, = struct.unpack('>I', b[pos:pos+4]); t = b[pos+4:pos+8]; d = b[pos+8:pos+8+n]; pos += 12 + n
        if t == b'IHDR': w, h, depth, ct, _, _, il = struct.unpack('>IIBBBBB', d)
        elif t == b'IDAT': idat += d
    assert depth == 8 and il == 0 and ct in (0, 2)
    ch = 3 if ct == 2 else 1
    raw = zlib.decompress(idat); stride = w * ch; out = bytearray(); prev = bytearray(stride)
    for y in range(h):
        f = raw[y*(stride+1)]; line = bytearray(raw[y*(stride+1)+1:(y+1)*(stride+1)])
        for i in range(stride):
            a = line[i-ch] if i >= ch else 0; up = prev[i]; c = prev[i-ch] if i >= ch else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + up) & 255
            elif f == 3: line[i] = (line[i] + (a + up) // 2) & 255
            elif f == 4:
                p = a + up - c; pa, pb, pc = abs(p-a), abs(p-up), abs(p-c)
                pr = a if pa <= pb and pa <= pc else (up if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        out += line; prev = line
    rgb = out if ch == 3 else bytes(v for v in out for _ in range(3))
    return w, h, rgb
for p in sys.argv[1:]:
    w, h, rgb = decode(p)
    s = sum(v * (i % 65521 + 1) for i, v in enumerate(rgb)) % (1 << 64)
    print(p.split('/')[-1], w, h, s, list(rgb[:6]), list(rgb[-3:]))
