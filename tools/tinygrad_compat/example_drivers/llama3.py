"""examples/llama3.py: a tiny Llama 3 (2 layers, dim 64, GQA 4/2 heads, vocab 256) written as a GGUF file (F32,
the feed-forward matrices Q8_0) and built by the example's build_transformer from it, as its default 1B model is
(load -> gguf_load -> convert_from_gguf -> load_state_dict). Then the example's prefill and greedy one-token steps
(jitted after the first). Outputs: the prompt's logits and the generated tokens."""

import os
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import save, timed

RTOL = 1e-4
ATOL = 1e-4

ARGS = {"dim": 64, "n_heads": 4, "n_kv_heads": 2, "n_layers": 2, "norm_eps": 1e-5, "rope_theta": 500000,
        "vocab_size": 256, "hidden_dim": 128}
PROMPT = [1, 200, 31, 7, 99, 14]
STEPS = 8


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _q8_0(w: np.ndarray) -> bytes:
    """llama.cpp's Q8_0: per 32 values an fp16 scale d = max|x|/127 and 32 int8 round(x/d)."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / 127.0).astype(np.float16)
    q = np.round(blocks / np.where(d == 0, 1, d.astype(np.float32))).astype(np.int8)
    return b"".join(db.tobytes() + qb.tobytes() for db, qb in zip(d, q))


def write_gguf(path: Path, tensors: dict[str, tuple[np.ndarray, int]]) -> None:
    """A GGUF v3 file: ggml type 0 (F32) or 8 (Q8_0) per tensor, dims innermost first, data 32-byte aligned."""
    kv = _str("general.architecture") + struct.pack("<I", 8) + _str("llama")
    infos, blobs, offset = b"", [], 0
    for name, (w, kind) in tensors.items():
        data = w.astype(np.float32).tobytes() if kind == 0 else _q8_0(w)
        infos += _str(name) + struct.pack("<I", w.ndim) + b"".join(struct.pack("<Q", d) for d in w.shape[::-1])
        infos += struct.pack("<IQ", kind, offset)
        pad = (-len(data)) % 32
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + kv + infos
    path.write_bytes(head + b"\0" * ((-len(head)) % 32) + b"".join(blobs))


def tiny_weights() -> dict[str, tuple[np.ndarray, int]]:
    rng = np.random.default_rng(3)
    dim, hid, kvd, voc = ARGS["dim"], ARGS["hidden_dim"], ARGS["dim"] // ARGS["n_heads"] * ARGS["n_kv_heads"], \
        ARGS["vocab_size"]
    def mat(o: int, i: int) -> np.ndarray:
        return rng.standard_normal((o, i)) / np.sqrt(i)
    def gain(n: int) -> np.ndarray:
        return 1 + 0.1 * rng.standard_normal(n)
    out = {"token_embd.weight": (rng.standard_normal((voc, dim)), 0), "output_norm.weight": (gain(dim), 0)}
    for b in range(ARGS["n_layers"]):
        out.update({f"blk.{b}.attn_norm.weight": (gain(dim), 0), f"blk.{b}.ffn_norm.weight": (gain(dim), 0),
                    f"blk.{b}.attn_q.weight": (mat(dim, dim), 0), f"blk.{b}.attn_k.weight": (mat(kvd, dim), 0),
                    f"blk.{b}.attn_v.weight": (mat(kvd, dim), 0), f"blk.{b}.attn_output.weight": (mat(dim, dim), 0),
                    f"blk.{b}.ffn_gate.weight": (mat(hid, dim), 8), f"blk.{b}.ffn_up.weight": (mat(hid, dim), 8),
                    f"blk.{b}.ffn_down.weight": (mat(dim, hid), 8)})
    return out


def main(out: str) -> None:
    import examples.llama3 as llama3
    from tinygrad import Device, Tensor
    llama3.MODEL_PARAMS["tiny"] = {"args": ARGS, "files": 1}
    llama3.device = Device.DEFAULT  # the example's __main__ sets this global, which prefill reads
    llama3.TEMPERATURE = 0.0
    with tempfile.TemporaryDirectory() as d:
        fn = Path(d) / "tiny.gguf"
        write_gguf(fn, tiny_weights())
        model = llama3.build_transformer(fn, model_size="tiny", max_context=32)

    logits = model(Tensor([PROMPT]), 0, float("nan")).realize()[0, -1].numpy()

    def generate() -> list[int]:
        start_pos = llama3.prefill(model, PROMPT[:-1])
        last, toks = PROMPT[-1], []
        for _ in range(STEPS):
            last = model(Tensor([[last]]), start_pos, llama3.TEMPERATURE, llama3.TOP_K, llama3.TOP_P,
                         llama3.ALPHA_F, llama3.ALPHA_P).item()
            toks.append(last)
            start_pos += 1
        return toks

    toks, seconds = timed(generate)
    save(out, seconds, logits=logits, tokens=np.array(toks, dtype=np.int64))


if __name__ == "__main__":
    main(sys.argv[1])
