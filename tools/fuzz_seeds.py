#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (fuzz/) from the shared assets.

    tools/fuzz_seeds.py OUT_DIR [--shared DIR] [--qbc BUILT_QBC]

Nothing is copied into the repository: OUT_DIR (tools/fuzz.sh uses build-fuzz/corpus) gets one
folder per target. Model files are shrunk to what the readers look at: safetensors and GGUF keep
their whole header (names, dtypes, metadata, tokenizer) with every tensor cut to a few elements,
so mutations land in the counts and sizes rather than in megabytes of weights. MBLT seeds need a
built qbc (`qbc parse`); JSON compile configs need PyYAML or a built qbc (`dump-config`).
Standard library only.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile
import sys
import zlib
from pathlib import Path

# ggml type id -> (block size, bytes per block), as in llama.cpp's ggml.c type traits.
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
        9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
        14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8),
        28: (1, 8), 30: (1, 2)}
ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
            "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def shrink_safetensors(src: Path) -> bytes:
    data = src.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    out, offset = {}, 0
    for name, entry in header.items():
        if name == "__metadata__":
            out[name] = entry
            continue
        size = ST_SIZES.get(entry["dtype"], 4)
        shape = [min(d, 2) for d in entry["shape"]]
        count = 1
        for d in shape:
            count *= d
        out[name] = {"dtype": entry["dtype"], "shape": shape,
                     "data_offsets": [offset, offset + count * size]}
        offset += count * size
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(range(256)) * (offset // 256) + \
        bytes(range(offset % 256))


class GgufCursor:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self) -> bytes:
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s

    def skip_value(self, t: int):
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t in sizes:
            self.pos += sizes[t]
        elif t == 8:
            self.string()
        elif t == 9:
            et, count = self.take("I"), self.take("Q")
            for _ in range(count):
                self.skip_value(et)
        else:
            raise ValueError(f"GGUF value type {t}")


def shrink_gguf(src: Path) -> bytes:
    data = src.read_bytes()
    c = GgufCursor(data)
    c.pos = 8
    n_tensors, n_kv = c.take("Q"), c.take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = c.string()
        t = c.take("I")
        if key == b"general.alignment" and t == 4:
            alignment = struct.unpack_from("<I", data, c.pos)[0]
        c.skip_value(t)
    out = bytearray(data[:c.pos])
    offset = 0
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.take("I")
        dims = [c.take("Q") for _ in range(n_dims)]
        t = c.take("I")
        c.take("Q")
        block, block_bytes = GGML.get(t, (1, 4))
        dims = [block if i == 0 else 1 for i in range(len(dims))]
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims)
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, offset)
        offset += block_bytes
        offset += (alignment - offset % alignment) % alignment
    out += bytes((alignment - len(out) % alignment) % alignment)
    out += bytes(offset)
    return bytes(out)


def npy(descr: str, shape: tuple, major: int, payload: bytes) -> bytes:
    dims = "".join(f"{d}, " for d in shape) if len(shape) == 1 else ", ".join(map(str, shape))
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    len_bytes = 2 if major == 1 else 4
    pad = (64 - (10 + len_bytes - 2 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    fmt = "<H" if major == 1 else "<I"
    return b"\x93NUMPY" + bytes([major, 0]) + struct.pack(fmt, len(header)) + header.encode() + \
        payload


def safetensors_bytes(tensors: dict) -> bytes:
    """A safetensors file (8-byte header length, JSON header, data) of name -> (dtype, shape, bytes)."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def packed_checkpoints():
    """fuzz_prequant_model seeds: a 1-layer Llama (hidden 32) packed as GPTQ v2, AWQ GEMM and
    compressed-tensors int4 groups of 32 (random codes; layouts in docs/frontend.md). Each seed is
    a little-endian uint32 n, n bytes of config.json, then the safetensors file."""
    import random
    rng = random.Random(25)
    def raw(n: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(n))
    def f32(n: int) -> bytes:
        return struct.pack(f"<{n}f", *[rng.uniform(-0.1, 0.1) for _ in range(n)])
    def f16(n: int) -> bytes:
        return struct.pack(f"<{n}e", *[rng.uniform(0.001, 0.01) for _ in range(n)])
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
           "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 32,
           "tie_word_embeddings": True, "rms_norm_eps": 1e-5}
    linears = {"self_attn.q_proj": (32, 32), "self_attn.k_proj": (16, 32),
               "self_attn.v_proj": (16, 32), "self_attn.o_proj": (32, 32),
               "mlp.gate_proj": (64, 32), "mlp.up_proj": (64, 32), "mlp.down_proj": (32, 64)}
    qconfigs = {
        "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False,
                 "sym": False, "checkpoint_format": "gptq_v2"},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
                "version": "gemm"},
        "ct": {"quant_method": "compressed-tensors", "format": "pack-quantized",
               "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                   "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                   "group_size": 32}}}, "ignore": ["lm_head"]},
    }
    for kind, q in qconfigs.items():
        t = {"model.embed_tokens.weight": ("F32", [32, 32], f32(32 * 32)),
             "model.norm.weight": ("F32", [32], f32(32)),
             "model.layers.0.input_layernorm.weight": ("F32", [32], f32(32)),
             "model.layers.0.post_attention_layernorm.weight": ("F32", [32], f32(32))}
        for m, (out, inp) in linears.items():
            pre = f"model.layers.0.{m}."
            g = inp // 32
            if kind == "gptq":
                t[pre + "qweight"] = ("I32", [inp // 8, out], raw(inp // 8 * out * 4))
                t[pre + "qzeros"] = ("I32", [g, out // 8], raw(g * out // 8 * 4))
                t[pre + "scales"] = ("F16", [g, out], f16(g * out))
                t[pre + "g_idx"] = ("I32", [inp], struct.pack(f"<{inp}i", *[i // 32 for i in range(inp)]))
            elif kind == "awq":
                t[pre + "qweight"] = ("I32", [inp, out // 8], raw(inp * out // 8 * 4))
                t[pre + "qzeros"] = ("I32", [g, out // 8], raw(g * out // 8 * 4))
                t[pre + "scales"] = ("F16", [g, out], f16(g * out))
            else:
                t[pre + "weight_packed"] = ("I32", [out, inp // 8], raw(out * inp // 8 * 4))
                t[pre + "weight_scale"] = ("F16", [out, g], f16(out * g))
                t[pre + "weight_shape"] = ("I64", [2], struct.pack("<2q", out, inp))
        c = json.dumps({**cfg, "quantization_config": q}).encode()
        yield f"{kind}.bin", struct.pack("<I", len(c)) + c + safetensors_bytes(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("QBC_SHARED", Path(__file__).parent.parent.parent /
                                                "shared")))
    ap.add_argument("--qbc", type=Path, default=None, help="a built qbc, for MBLT seeds")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    shared = args.shared
    if not shared.is_dir():
        print(f"fuzz_seeds: no shared assets at {shared} (set QBC_SHARED)", file=sys.stderr)
        return 2
    dirs = {k: args.out / k for k in ("safetensors", "gguf", "config_json", "prequant_config",
                                      "prequant_model",
                                      "tokenizer_json",
                                      "vocab_json", "chat_template", "compile_config_json", "compile_config_yaml", "mblt", "mblt_text",
                                      "npy", "mxq", "kv_cache", "image")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)

    def put(kind: str, name: str, data: bytes):
        (dirs[kind] / name).write_bytes(data)

    models = sorted(shared.glob("models/**/*.safetensors"))
    for i, p in enumerate(models):
        put("safetensors", f"{i:02d}-{p.parent.parent.name}-{p.parent.name}.safetensors",
            shrink_safetensors(p))
    for i, p in enumerate(sorted(shared.glob("**/*.gguf"))):
        seed = shrink_gguf(p)
        if len(seed) <= 1 << 20:  # vocab-only files keep their vocabulary: skip the largest
            put("gguf", f"{i:02d}-{p.stem}.gguf", seed)
    for i, p in enumerate(sorted(shared.glob("**/config.json"))):
        if "tokenizer" not in p.name:
            put("config_json", f"{i:02d}-{p.parent.name}.json", p.read_bytes())
    # The published configs stored with the tests (EXAONE, Phi-4-mini: tests/assets/model-configs).
    assets = Path(__file__).resolve().parent.parent / "tests" / "assets" / "model-configs"
    for p in sorted(assets.glob("*/config.json")):
        put("config_json", f"asset-{p.parent.name}.json", p.read_bytes())
    # quantization_config of each pre-quantized format (docs/frontend.md), written here.
    arch = {"architectures": ["LlamaForCausalLM"]}
    ct_weights = {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                  "group_size": 128, "actorder": "group"}
    for name, q in {
        "ct-pack": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                    "config_groups": {"group_0": {"targets": ["Linear"], "weights": ct_weights}},
                    "ignore": ["lm_head", "re:.*vision.*"],
                    "kv_cache_scheme": {"num_bits": 8, "type": "int", "strategy": "tensor"}},
        "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True,
                 "sym": False, "checkpoint_format": "gptq"},
        "gptq-dynamic": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True,
                         "sym": True, "checkpoint_format": "gptq",
                         "dynamic": {"-:model\\.layers\\.([2-9]\\d*|[1-9]\\d+)\\..*": {},
                                     ".*\\.1\\..*": {"bits": 8, "group_size": 32,
                                                      "desc_act": False}}},
        "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": ["visual"]},
        "auto-round": {"quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
                       "bits": 4, "group_size": 128, "sym": True,
                       "extra_config": {"model.layers.0.mlp.down_proj": {"bits": 8}}},
    }.items():
        put("prequant_config", f"{name}.json", json.dumps({**arch, "quantization_config": q}).encode())
    for name, data in packed_checkpoints():
        put("prequant_model", name, data)
    for i, p in enumerate(sorted(shared.glob("**/tokenizer.json"))):
        if p.stat().st_size <= 4 << 20:
            put("tokenizer_json", f"{i:02d}-{p.parent.parent.name}.json", p.read_bytes())
    # Chat templates: those of the shared tokenizer configs, and ChatML written here.
    for i, p in enumerate(sorted(shared.glob("**/tokenizer_config.json"))):
        t = json.loads(p.read_text()).get("chat_template")
        if isinstance(t, str):
            put("chat_template", f"{i:02d}-{p.parent.parent.name}.jinja", t.encode())
    put("chat_template", "chatml.jinja",
        b"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        b"message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
        b"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    # qbc_vocab.json: the asset `qbc compile` of a GGUF writes (needs a built qbc).
    if args.qbc is not None and args.qbc.exists():
        import subprocess
        import tempfile
        for i, p in enumerate(sorted(shared.glob("models/**/*.gguf"))[:1]):
            with tempfile.TemporaryDirectory() as tmp:
                mxq = Path(tmp) / "g.mxq"
                r = subprocess.run([str(args.qbc), "compile", str(p), "--preset", "llm_fast",
                                    "--use-random-calib", "--set", "calibration.numSamples=1",
                                    "--set", "calibration.seqLength=16", "--set",
                                    "llm.attributes.maxSequenceLength=32", "--set",
                                    "llm.attributes.maxCacheLength=32", "-o", str(mxq)],
                                   capture_output=True)
                if r.returncode == 0:
                    data = mxq.read_bytes()
                    at = data.find(b'{"format":"qbc-vocab"')
                    end = data.find(b"\n", at)
                    if at >= 0 and end > at:
                        put("vocab_json", f"{i:02d}-{p.stem}.json", data[at:end + 1])
    yamls = sorted((root / "configs").glob("**/*.yaml"))
    for p in yamls:
        put("compile_config_yaml", f"{p.parent.name}-{p.name}", p.read_bytes())
    try:
        import yaml  # PyYAML, when installed
        for p in yamls:
            if p.parent.name == "targets":
                continue
            doc = yaml.safe_load(p.read_text())
            put("compile_config_json", f"{p.parent.name}-{p.stem}.json", json.dumps(doc).encode())
    except ImportError:
        pass
    put("compile_config_json", "small.json",
        b'{"quantization": {"weightBits": 8}, "llm": {"attributes": {"maxSequenceLength": 256}}}')
    if args.qbc is not None and args.qbc.exists():
        for preset in ("llm", "llm_fast", "multimodal"):
            r = subprocess.run([str(args.qbc), "dump-config", "--preset", preset, "--format",
                                "json"], capture_output=True)
            if r.returncode == 0:
                put("compile_config_json", f"preset-{preset}.json", r.stdout)
        for p in sorted(shared.glob("models/**/hf")):
            out = dirs["mblt"] / f"{p.parent.name}.mblt"
            subprocess.run([str(args.qbc), "-q", "parse", str(p), "-o", str(out)],
                           capture_output=True)
            if out.exists():  # the text form: what follows the summary of `inspect --graph`
                r = subprocess.run([str(args.qbc), "inspect", "--graph", str(out)],
                                   capture_output=True)
                text = r.stdout.decode(errors="replace")
                if "\nmblt 1\n" in text:
                    put("mblt_text", f"{p.parent.name}.mblt.txt",
                        text[text.index("\nmblt 1\n") + 1:].encode())
        # MXQ: stories260K compiled for a short cache (small programs), single file.
        hf = shared / "models/stories260k/hf"
        if hf.is_dir():
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "s.mxq"
                subprocess.run([str(args.qbc), "-q", "compile", str(hf), "--preset", "llm_fast",
                                "--use-random-calib", "--set", "calibration.numSamples=2",
                                "--set", "calibration.seqLength=32",
                                "--set", "llm.attributes.maxCoreDataLength=16",
                                "--set", "llm.attributes.maxCacheLength=32",
                                "--set", "llm.attributes.maxSequenceLength=32", "-o", str(out)],
                               capture_output=True)
                if out.exists():
                    put("mxq", "stories260k-w8.mxq", out.read_bytes())
                    # kv_cache: the model fuzz_kv_cache loads (beside the corpus folders, not a
                    # seed) and sequence caches `qbc run --save-cache` writes for it.
                    model = args.out.parent / "kv_cache-model.mxq"
                    shutil.copyfile(out, model)
                    for name, n in (("prompt", "0"), ("generated", "4")):
                        seq = Path(tmp) / f"{name}.seq"
                        subprocess.run([str(args.qbc), "-q", "run", str(model), "-p",
                                        "Once upon a time", "-n", n, "--save-cache", str(seq)],
                                       capture_output=True)
                        if seq.exists():
                            put("kv_cache", f"{name}.seq", seq.read_bytes())
    floats = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put("npy", "f4-v1.npy", npy("<f4", (2, 3), 1, floats))
    put("npy", "f4-v2-1d.npy", npy("<f4", (6,), 2, floats))
    put("npy", "f2-v3.npy", npy("<f2", (1, 2, 2), 3, struct.pack("<4H", 0x3C00, 0x4000, 0, 0x8001)))
    put("npy", "f8-v1.npy", npy("<f8", (2,), 1, struct.pack("<2d", 0.5, -1e300)))
    put("npy", "empty.npy", npy("<f4", (0, 4), 1, b""))
    # Images: the shared photographs, and small PNGs of the other colour types written here
    # from the PNG spec (chunks of length, type, data, CRC-32; IDAT a zlib stream of rows each
    # led by filter byte 0).
    for p in sorted(shared.glob("data/images/*")):
        if p.suffix in (".png", ".jpg"):
            put("image", p.name, p.read_bytes())

    def png(w: int, h: int, depth: int, ctype: int, rows: list, extra: bytes = b"") -> bytes:
        def chunk(t: bytes, d: bytes) -> bytes:
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
        ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
        raw = b"".join(b"\0" + r for r in rows)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    put("image", "gray1.png", png(8, 2, 1, 0, [b"\xa5", b"\x5a"]))
    put("image", "rgba16.png", png(2, 2, 16, 6, [bytes(range(16)), bytes(range(16, 32))]))
    plte = struct.pack(">I", 6) + b"PLTE" + bytes([1, 2, 3, 4, 5, 6])
    plte += struct.pack(">I", zlib.crc32(b"PLTE" + bytes([1, 2, 3, 4, 5, 6])))
    put("image", "palette.png", png(3, 1, 8, 3, [bytes([0, 1, 0])], plte))
    for kind, d in dirs.items():
        print(f"{kind}: {len(list(d.iterdir()))} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
