"""Quantized LLaMA on the CPU: this project (tinygrad.llm.quant.llama_from_gguf) against llama.cpp
(llama-cpp-python) on the same GGUF files.

    python bench/llm_cpp.py                     # a ~150M-parameter LLaMA, Q8_0, Q4_0 and Q4_K_M
    python bench/llm_cpp.py --quick             # a tiny model: checks that the bench runs; its numbers mean nothing
    python bench/llm_cpp.py --shape 1b --types Q4_0   # LLaMA-3.2-1B's shapes (--shape 8b: LLaMA-3-8B's)

It needs llama-cpp-python (`pip install llama-cpp-python`: pip builds llama.cpp from the source distribution
with cmake and a C++ compiler, for this machine's CPU). Without it the bench says so and exits: nothing here can
stand in for llama.cpp. It is not a CI dependency.

The model: a LLaMA of random weights (seeded numpy normals, scaled so that activations stay near 1) written as
float32 by the gguf package, with a vocabulary that llama.cpp accepts (its ids are fed directly; no text is
tokenized), then quantized to each type by llama.cpp's own quantizer (`llama_model_quantize`, as the
`llama-quantize` tool does). Both frameworks load each quantized file.

Each framework runs in a process of its own, one after the other, with the same number of threads (`--threads`,
default: the usable cores): it loads the file, runs the prompt once for the first token's logits, one generation
to warm up (this project compiles its kernels and captures its decode step there), then times `--runs`
generations of the same seeded prompt and reports medians:
- prefill: the prompt (128 tokens) up to the first new token's id; tokens/s = prompt length / time;
- decode: the next 64 tokens one at a time, greedy, with the KV cache; tokens/s = 64 / time.
Memory: VmRSS (/proc/self/status) added by loading, against the file's size. The first token's logits of the two
are compared: both dequantize the same blocks, so they differ by summation order and by llama.cpp quantizing the
activations of its quantized products (to Q8_0/Q8_K), which is within the quantization's own error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from envs import cpu_name
from harness import machine_line, proc_status, spawn_json

HERE = Path(__file__).resolve()
SHAPES: dict[str, dict[str, int]] = {
    "quick": {"dim": 256, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 1024},
    "small": {"dim": 1024, "layers": 8, "heads": 16, "kv_heads": 4, "ffn": 2816, "vocab": 32000},
    "1b": {"dim": 2048, "layers": 16, "heads": 32, "kv_heads": 8, "ffn": 8192, "vocab": 128256},
    "8b": {"dim": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256},
}
# llama.cpp's names of the file types its quantizer writes (enum llama_ftype)
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q6_K": 18, "Q4_K_S": 14, "Q4_K_M": 15,
          "Q5_K_M": 17, "IQ4_XS": 30}
WORKER_TIMEOUT_S = 3600
NO_LLAMA_CPP = ("llama_cpp is not importable ({error}): this bench compares against llama.cpp through "
                "llama-cpp-python. Install it with `pip install llama-cpp-python` (pip builds llama.cpp from the "
                "source distribution; it needs cmake and a C++ compiler) and run the bench again.")


# ---- the model ------------------------------------------------------------------------------------------------------

def write_f32(path: Path, s: dict[str, int], context: int) -> None:
    """A random LLaMA as a float32 GGUF file with an SPM vocabulary of s["vocab"] tokens (unk, bos, eos, the 256
    byte tokens, then plain pieces), which llama.cpp needs to load a model."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    dim, head_dim = s["dim"], s["dim"] // s["heads"]
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("block_count", s["layers"]), ("context_length", context), ("embedding_length", dim),
                       ("feed_forward_length", s["ffn"]), ("head_count", s["heads"]),
                       ("head_count_kv", s["kv_heads"]), ("rope_dimension_count", head_dim),
                       ("rope_freq_base", 500000.0), ("layer_norm_rms_eps", 1e-5), ("file_type", 0)):
        getattr(w, f"add_{key}")(value)
    pieces = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)]]
    pieces += [f"▁t{i}" for i in range(s["vocab"] - len(pieces))]
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(s["vocab"] - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259))  # unknown, control x2, byte, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def normal(*shape: int, fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32)

    w.add_tensor("token_embd.weight", normal(s["vocab"], dim, fan_in=1) * 0.5)
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    w.add_tensor("output.weight", normal(s["vocab"], dim, fan_in=dim))
    kv = s["kv_heads"] * head_dim
    for i in range(s["layers"]):
        for name, shape in (("attn_q", (dim, dim)), ("attn_k", (kv, dim)), ("attn_v", (kv, dim)),
                            ("attn_output", (dim, dim)), ("ffn_gate", (s["ffn"], dim)), ("ffn_up", (s["ffn"], dim)),
                            ("ffn_down", (dim, s["ffn"]))):
            w.add_tensor(f"blk.{i}.{name}.weight", normal(*shape, fan_in=shape[1]))
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ones(dim, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: Path, dst: Path, type_name: str, threads: int) -> None:
    """src quantized to type_name by llama.cpp's quantizer."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[type_name]
    params.nthread = threads
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise RuntimeError(f"llama.cpp could not quantize {src} to {type_name}")


# ---- the workers ----------------------------------------------------------------------------------------------------

def _prompt(vocab: int, n: int) -> list[int]:
    import numpy as np

    return np.random.default_rng(1).integers(259, vocab, n).tolist()  # plain pieces only


def run_ours(path: Path, prompt: list[int], new: int, runs: int) -> dict[str, Any]:
    from tinygrad import Tensor
    from tinygrad.llm.quant import llama_from_gguf

    rss0 = proc_status("VmRSS")
    t = time.perf_counter()
    model = llama_from_gguf(path, max_context=len(prompt) + new + 8)
    load_s, rss1 = time.perf_counter() - t, proc_status("VmRSS")
    logits = model.forward(Tensor([prompt]), 0)[0, -1].numpy()

    def generate() -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        gen = model.generate(prompt, new + 1)
        first = next(gen)
        t1 = time.perf_counter()
        rest = list(gen)
        return t1 - t0, time.perf_counter() - t1, [first, *rest]

    return {**_timed(generate, runs, len(prompt), new), "load_s": load_s, "rss": rss1 - rss0,
            "logits": logits.tolist(), "info": f"CPU_THREADS={os.environ.get('CPU_THREADS', 'default')}"}


def run_cpp(path: Path, prompt: list[int], new: int, runs: int) -> dict[str, Any]:
    import llama_cpp
    import numpy as np

    threads = int(os.environ["CPU_THREADS"])
    rss0 = proc_status("VmRSS")
    t = time.perf_counter()
    llm = llama_cpp.Llama(str(path), n_ctx=len(prompt) + new + 8, n_batch=len(prompt), n_threads=threads,
                          n_threads_batch=threads, use_mmap=True, verbose=False)
    load_s, rss1 = time.perf_counter() - t, proc_status("VmRSS")

    vocab = llm.n_vocab()

    def last() -> np.ndarray:
        # the last evaluated token's logits, read from the context: Llama.eval keeps them only with logits_all,
        # which would make the prefill compute the output projection for every prompt token
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(vocab,))

    llm.reset()
    llm.eval(prompt)
    logits = last().copy()

    def generate() -> tuple[float, float, list[int]]:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        ids = [int(last().argmax())]
        t1 = time.perf_counter()
        for _ in range(new):
            llm.eval([ids[-1]])
            ids.append(int(last().argmax()))
        return t1 - t0, time.perf_counter() - t1, ids

    return {**_timed(generate, runs, len(prompt), new), "load_s": load_s, "rss": rss1 - rss0,
            "logits": logits.tolist(), "info": f"llama-cpp-python {llama_cpp.__version__}, {threads} threads"}


def _timed(generate: Any, runs: int, prompt_len: int, new: int) -> dict[str, Any]:
    """`runs` + 1 generations, the first a warm-up timed apart: prefill and decode tokens/s, the last ids."""
    prefill, decode, warmup, ids = [], [], 0.0, []
    for i in range(runs + 1):
        first_s, rest_s, ids = generate()
        if i:
            prefill.append(prompt_len / first_s)
            decode.append(new / rest_s)
        else:
            warmup = first_s + rest_s
    return {"prefill": prefill, "decode": decode, "ids": ids, "warmup_s": warmup}


# ---- the report -----------------------------------------------------------------------------------------------------

def _logit_gap(a: list[float], b: list[float]) -> str:
    import numpy as np

    x, y = np.asarray(a), np.asarray(b)
    return f"max abs diff {np.abs(x - y).max():.3g} of max abs logit {np.abs(y).max():.3g}; argmax " + \
        ("agrees" if x.argmax() == y.argmax() else "differs")


def report_rows(type_name: str, size: int, results: dict[str, dict[str, Any] | str]) -> list[str]:
    ours, cpp = results.get("ours"), results.get("cpp")
    if not isinstance(ours, dict) or not isinstance(cpp, dict):
        failed = "; ".join(f"{k} FAILED: {v}" for k, v in results.items() if isinstance(v, str))
        return [f"| {type_name} | {failed.replace('|', '/')} |" + " |" * 9]
    cells = [type_name, f"{size / 2**20:,.0f} MiB"]
    for key in ("prefill", "decode"):
        a, b = statistics.median(ours[key]), statistics.median(cpp[key])
        cells += [f"{a:,.1f}", f"{b:,.1f}", f"{a / b:.2f}x"]
    cells += [f"{ours['rss'] / size:.2f}x / {cpp['rss'] / size:.2f}x", _logit_gap(ours["logits"], cpp["logits"])]
    same = next((i for i, (x, y) in enumerate(zip(ours["ids"], cpp["ids"])) if x != y), len(ours["ids"]))
    cells.append(f"{same} of {len(ours['ids'])}")
    return ["| " + " | ".join(cells) + " |"]


# ---- the parent -----------------------------------------------------------------------------------------------------

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny model, a short prompt: a smoke test")
    p.add_argument("--shape", choices=list(SHAPES), default=None, help="model shape (default small; --quick quick)")
    p.add_argument("--types", default="Q8_0,Q4_0,Q4_K_M", help=f"comma-separated, of {', '.join(FTYPES)}")
    p.add_argument("--runs", type=int, default=None, help="timed runs per framework (default 3; --quick 1)")
    p.add_argument("--prompt", type=int, default=None, help="prompt length in tokens (default 128; --quick 16)")
    p.add_argument("--new", type=int, default=None, help="new tokens (default 64; --quick 8)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads of both")
    p.add_argument("--timeout", type=int, default=WORKER_TIMEOUT_S, help="seconds a framework may take per file")
    p.add_argument("--worker", choices=["ours", "cpp"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.runs = args.runs or (1 if args.quick else 3)
    args.prompt = args.prompt or (16 if args.quick else 128)
    args.new = args.new or (8 if args.quick else 64)
    shape = SHAPES[args.shape or ("quick" if args.quick else "small")]
    if args.worker:
        run = run_ours if args.worker == "ours" else run_cpp
        print(json.dumps(run(Path(args.model), _prompt(shape["vocab"], args.prompt), args.new, args.runs)))
        return
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:  # the whole comparison is against it
        print(NO_LLAMA_CPP.format(error=e), file=sys.stderr)
        sys.exit(0)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in FTYPES]
    if unknown:
        sys.exit(f"--types {unknown} unknown; known: {', '.join(FTYPES)}")
    env = {"DEV": "CPU", "CPU_THREADS": str(args.threads), "OMP_NUM_THREADS": str(args.threads)}
    extra = ["--runs", str(args.runs), "--prompt", str(args.prompt), "--new", str(args.new),
             "--shape", args.shape or ("quick" if args.quick else "small")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tg-bench-llm-cpp-") as tmp:
        f32 = Path(tmp) / "f32.gguf"
        print(f"writing the model to {f32} ...", file=sys.stderr, flush=True)
        write_f32(f32, shape, args.prompt + args.new + 8)
        for type_name in types:
            path = Path(tmp) / f"{type_name}.gguf"
            quantize(f32, path, type_name, args.threads)
            results: dict[str, dict[str, Any] | str] = {}
            for fw in ("ours", "cpp"):
                print(f"{type_name}: running {fw} ...", file=sys.stderr, flush=True)
                cold = {"TINYGRAD_CACHE_DIR": str(Path(tmp) / "kernel-cache")}
                argv = ["--worker", fw, "--model", str(path), *extra]
                results[fw] = spawn_json(HERE, argv, {**env, **cold}, args.timeout)
            rows += report_rows(type_name, path.stat().st_size, results)
            path.unlink()
    params = shape["vocab"] * shape["dim"] * 2 + shape["layers"] * (
        2 * shape["dim"] ** 2 + 2 * shape["dim"] * shape["kv_heads"] * shape["dim"] // shape["heads"]
        + 3 * shape["dim"] * shape["ffn"])
    print("\n".join([
        f"# Quantized LLaMA on the CPU: this project against llama.cpp ({'quick, tiny model: ' if args.quick else ''}"
        f"{params / 1e6:.0f}M parameters)", "",
        f"- CPU: {cpu_name()}; {machine_line()}",
        "- shape: " + ", ".join(f"{k} {v}" for k, v in shape.items()) + "; random weights",
        f"- prompt {args.prompt} tokens, then {args.new} new tokens (greedy); median of {args.runs} runs after one "
        f"warm-up run; {args.threads} threads each", "",
        "| type | file | prefill tok/s ours | llama.cpp | ratio | decode tok/s ours | llama.cpp | ratio | "
        "RSS added / file (ours / llama.cpp) | first token's logits | greedy ids agreeing |",
        "|---|---|---|---|---|---|---|---|---|---|---|", *rows]))


if __name__ == "__main__":
    main()
