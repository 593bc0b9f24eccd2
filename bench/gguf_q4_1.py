#!/usr/bin/env python3
"""Rewrites an F32 GGUF with its 2-D weights as Q4_1 (ggml type 3), for measuring Q4_1 codes
kept with float offsets against re-quantization (docs/frontend.md "Q4_1 and Q5_1: codes kept
with float offsets").

Written from the GGUF specification (ggml docs/gguf.md: header, metadata key/values, tensor
infos, data aligned to general.alignment, default 32) and ggml's quantize_row_q4_1_ref: per
block of 32 values, min and max, d = (max - min) / 15, q = min(15, int((x - min) / d + 0.5)),
stored as fp16 d, fp16 min, then 16 bytes whose low nibble is value j and high nibble value
j + 16. Pure Python (no numpy): fine for stories260K.

  bench/gguf_q4_1.py IN.gguf OUT.gguf
"""
import struct
import sys

F32, Q4_1 = 0, 3
# Value types of metadata (GGUF spec): sizes of the fixed-width ones.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data):
        self.b, self.o = data, 0

    def take(self, n):
        s = self.b[self.o:self.o + n]
        self.o += n
        return s

    def u32(self):
        return struct.unpack('<I', self.take(4))[0]

    def u64(self):
        return struct.unpack('<Q', self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def value(self, t):
        """The raw bytes of one value of type t (copied through unchanged)."""
        start = self.o
        if t in FIXED:
            self.take(FIXED[t])
        elif t == STRING:
            self.string()
        elif t == ARRAY:
            et, n = self.u32(), self.u64()
            for _ in range(n):
                self.value(et)
        else:
            raise SystemExit(f'unknown metadata type {t} at byte {start}')
        return self.b[start:self.o]


def fp16(x):
    return struct.pack('<e', x)


def q4_1_block(xs):
    lo, hi = min(xs), max(xs)
    d = (hi - lo) / 15.0
    inv = 1.0 / d if d else 0.0
    q = [min(15, int((x - lo) * inv + 0.5)) for x in xs]
    return fp16(d) + fp16(lo) + bytes(q[j] | (q[j + 16] << 4) for j in range(16))


def main():
    if len(sys.argv) != 3:
        raise SystemExit('usage: gguf_q4_1.py IN.gguf OUT.gguf')
    data = open(sys.argv[1], 'rb').read()
    r = Reader(data)
    if r.take(4) != b'GGUF':
        raise SystemExit(f'{sys.argv[1]}: not a GGUF file')
    version, n_tensors, n_kv = r.u32(), r.u64(), r.u64()
    kv_start = r.o
    align = 32
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        raw = r.value(t)
        if key == b'general.alignment':
            align = struct.unpack('<I', raw)[0]
    kv_bytes = data[kv_start:r.o]
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.u64() for _ in range(r.u32())]
        infos.append([name, dims, r.u32(), r.u64()])
    base = (r.o + align - 1) // align * align
    out_infos, blobs, converted = [], [], 0
    for name, dims, t, off in infos:
        count = 1
        for d in dims:
            count *= d
        if t == F32:
            vals = struct.unpack_from(f'<{count}f', data, base + off)
        if t == F32 and len(dims) == 2 and dims[0] % 32 == 0:
            blob = b''.join(q4_1_block(vals[i:i + 32]) for i in range(0, count, 32))
            t, converted = Q4_1, converted + 1
        elif t == F32:
            blob = struct.pack(f'<{count}f', *vals)
        else:
            raise SystemExit(f'tensor {name.decode()}: type {t}; this tool reads F32 files only')
        out_infos.append((name, dims, t))
        blobs.append(blob)
    head = bytearray(b'GGUF' + struct.pack('<IQQ', version, n_tensors, n_kv) + kv_bytes)
    offsets, pos = [], 0
    for blob in blobs:
        offsets.append(pos)
        pos = (pos + len(blob) + align - 1) // align * align
    for (name, dims, t), off in zip(out_infos, offsets):
        head += struct.pack('<Q', len(name)) + name + struct.pack('<I', len(dims))
        head += b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', t, off)
    head += bytes((-len(head)) % align)
    body = bytearray()
    for blob, off in zip(blobs, offsets):
        body += bytes(off - len(body)) + blob
    open(sys.argv[2], 'wb').write(bytes(head) + bytes(body))
    print(f'{sys.argv[2]}: {converted} of {n_tensors} tensors as Q4_1')


if __name__ == '__main__':
    main()
