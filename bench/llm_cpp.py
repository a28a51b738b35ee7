"""Quantized LLaMA on the CPU: this project (tinygrad.llm.quant.llama_from_gguf) against llama.cpp
(llama-cpp-python) on the same GGUF files.

    python bench/llm_cpp.py                     # a ~150M-parameter LLaMA, Q8_0, Q4_0 and Q4_K_M
    python bench/llm_cpp.py --quick             # a tiny model: checks that the bench runs; its numbers mean nothing
    python bench/llm_cpp.py --shape 1b --types Q4_0   # LLaMA-3.2-1B's shapes
    python bench/llm_cpp.py --shape 1b --rounds 3 --runs 2 --workdir /tmp/llm-1b   # alternated: a noisy machine
    python bench/llm_cpp.py --shape 8b --types Q4_K_M --runs 2 --workdir /tmp/llm-8b   # LLaMA-3-8B's shapes

It needs llama-cpp-python (`pip install llama-cpp-python`: pip builds llama.cpp from the source distribution
with cmake and a C++ compiler, for this machine's CPU). Without it the bench says so and exits: nothing here can
stand in for llama.cpp. It is not a CI dependency. On a virtual machine whose CPU flags list AMX (amx_tile,
amx_int8) without the hypervisor letting a process use the tiles, the default build (-march=native) picks ggml's
AMX matrix products and dies with SIGSEGV at its first `ldtilecfg`, in any batch of more than one token (a prompt);
build it without AMX there (AMX_FREE_BUILD below; the report's failed row says so too), e.g. into a folder of its
own that PYTHONPATH puts first:

    CMAKE_ARGS="$AMX_FREE_BUILD" pip install --no-deps --target /tmp/llama-cpp-no-amx llama-cpp-python
    PYTHONPATH=/tmp/llama-cpp-no-amx python bench/llm_cpp.py ...

The model: a LLaMA of random weights (seeded numpy normals, scaled so that activations stay near 1) written by the
gguf package one tensor at a time (float32, or float16 with --f16, the default for --shape 8b), with a vocabulary
that llama.cpp accepts (its ids are fed directly; no text is tokenized), then quantized to each type by llama.cpp's
own quantizer (`llama_model_quantize`, as the `llama-quantize` tool does); the unquantized file is deleted before
anything runs. Both frameworks load each quantized file.

--shape 8b (LLaMA-3-8B: dim 4096, 32 layers, 32 heads, 8 KV heads, ffn 14336, vocab 128256) needs about 16 GB of
disk for the float16 file while it is quantized and 5 GB for the Q4_K_M file, about 6 GB of memory per framework,
and on two cores some 15 minutes to write and quantize and some 10 more per framework (each loads, compiles or
repacks, and runs --runs + 1 generations). --workdir keeps the quantized files, and a later run with the same
--workdir reuses them (delete the folder when done).

Each framework runs in a process of its own, one after the other, with the same number of threads (`--threads`,
default: the usable cores): it loads the file, runs the prompt once for the first token's logits, one generation
to warm up (this project compiles its kernels and captures its decode step there), then times `--runs`
generations of the same seeded prompt and reports medians:
- prefill: the prompt (128 tokens) up to the first new token's id; tokens/s = prompt length / time;
- decode: the next 64 tokens one at a time, greedy, with the KV cache; tokens/s = 64 / time.
With `--rounds R` each framework runs R worker processes, alternated with the other's, and the medians are over
all their timed runs: on a shared machine, whose speed changes from one minute to the next, a busy spell then weighs
on both frameworks rather than on whichever ran during it.
Memory, against the file's size: VmRSS (/proc/self/status) added by loading, and the process's peak VmRSS (VmHWM,
the interpreter and libraries included) over the whole run. llama.cpp maps the file: its pages count in its RSS
as they are read. Load: seconds to a model ready to run (this project: read and repack the blocks; kernels compile
in the warm-up). The first token's logits of the two are compared: both dequantize the same blocks, so they differ
by summation order and by llama.cpp quantizing the activations of its quantized products (to Q8_0/Q8_K), which is
within the quantization's own error.
"""

from __future__ import annotations

import argparse
import contextlib
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
#: the context length the files' metadata names (LLaMA-3's); each run loads with the context its prompt needs
CONTEXT = 8192
#: cmake flags for llama.cpp with the AVX-512 paths (VNNI included) that -march=native would pick, but no AMX
AMX_FREE_BUILD = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
                  "-DGGML_AVX_VNNI=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON "
                  "-DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF")
CPP_SEGFAULT = ("llama.cpp died with SIGSEGV; where the CPU lists AMX but the machine does not let processes use it, "
                "build llama-cpp-python with CMAKE_ARGS=\"{flags}\" (see the module's doc)")
NO_LLAMA_CPP = ("llama_cpp is not importable ({error}): this bench compares against llama.cpp through "
                "llama-cpp-python. Install it with `pip install llama-cpp-python` (pip builds llama.cpp from the "
                "source distribution; it needs cmake and a C++ compiler) and run the bench again.")


# ---- the model ------------------------------------------------------------------------------------------------------

def write_model(path: Path, s: dict[str, int], context: int, f16: bool = False) -> None:
    """A random LLaMA as a GGUF file with an SPM vocabulary of s["vocab"] tokens (unk, bos, eos, the 256 byte tokens,
    then plain pieces), which llama.cpp needs to load a model. Its matrices are float32, or float16 with f16 (half
    the disk for the quantizer's input; the norms stay float32 as llama.cpp's converters write them).

    Streamed: every tensor's header entry is written first, then the tensors one at a time, each made just before it
    is written, so that memory holds one tensor (an 8B model's float32 tensors would need 32 GB at once)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    dim, head_dim, kv = s["dim"], s["dim"] // s["heads"], s["kv_heads"] * (s["dim"] // s["heads"])
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("block_count", s["layers"]), ("context_length", context), ("embedding_length", dim),
                       ("feed_forward_length", s["ffn"]), ("head_count", s["heads"]),
                       ("head_count_kv", s["kv_heads"]), ("rope_dimension_count", head_dim),
                       ("rope_freq_base", 500000.0), ("layer_norm_rms_eps", 1e-5),
                       ("file_type", 1 if f16 else 0)):  # llama_ftype: ALL_F32 0, MOSTLY_F16 1
        getattr(w, f"add_{key}")(value)
    pieces = ["<unk>", "<s>", "</s>", *[f"<0x{b:02X}>" for b in range(256)]]
    pieces += [f"▁t{i}" for i in range(s["vocab"] - len(pieces))]
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(s["vocab"] - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (s["vocab"] - 259))  # unknown, control x2, byte, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    # (name, shape, fan_in, scale); fan_in 0: a norm's ones
    specs: list[tuple[str, tuple[int, ...], int, float]] = [
        ("token_embd.weight", (s["vocab"], dim), 1, 0.5), ("output_norm.weight", (dim,), 0, 1.0),
        ("output.weight", (s["vocab"], dim), dim, 1.0)]
    for i in range(s["layers"]):
        for name, (rows, cols) in (("attn_q", (dim, dim)), ("attn_k", (kv, dim)), ("attn_v", (kv, dim)),
                                   ("attn_output", (dim, dim)), ("ffn_gate", (s["ffn"], dim)),
                                   ("ffn_up", (s["ffn"], dim)), ("ffn_down", (dim, s["ffn"]))):
            specs.append((f"blk.{i}.{name}.weight", (rows, cols), cols, 1.0))
        specs += [(f"blk.{i}.{name}.weight", (dim,), 0, 1.0) for name in ("attn_norm", "ffn_norm")]

    def dtype(fan_in: int) -> Any:
        return np.float16 if f16 and fan_in else np.float32

    for name, dims, fan_in, _ in specs:
        w.add_tensor_info(name, dims, np.dtype(dtype(fan_in)), int(np.prod(dims)) * np.dtype(dtype(fan_in)).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rows_per_chunk = 4096  # float32 normals are drawn a chunk of rows at a time: the same stream, less memory
    for _, dims, fan_in, scale in specs:
        if not fan_in:
            w.write_tensor_data(np.ones(dims, np.float32))
            continue
        t = np.empty(dims, dtype(fan_in))
        for at in range(0, dims[0], rows_per_chunk):
            chunk = rng.standard_normal((min(rows_per_chunk, dims[0] - at), dims[1]), dtype=np.float32)
            t[at:at + len(chunk)] = chunk * np.float32(scale / np.sqrt(fan_in))
        w.write_tensor_data(t)
        del t
    w.close()


def quantize(src: Path, dst: Path, type_name: str, threads: int) -> None:
    """src quantized to type_name by llama.cpp's quantizer, written beside dst and renamed over it when done (so an
    interrupted run leaves no partial file that a later run of a --workdir would take for a finished one)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[type_name]
    params.nthread = threads
    part = dst.with_name(dst.name + ".part")
    if llama_cpp.llama_model_quantize(str(src).encode(), str(part).encode(), params) != 0:
        part.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp could not quantize {src} to {type_name}")
    part.replace(dst)


def make_files(work: Path, name: str, shape: dict[str, int], types: list[str], f16: bool, threads: int) -> None:
    """work/{name}-{type}.gguf for each of types: the random model written unquantized, quantized to each, and the
    unquantized file deleted before anything runs (an 8B model's is 16 GB as float16)."""
    if not types:
        return
    src = work / f"{name}-{'f16' if f16 else 'f32'}.gguf"
    try:
        print(f"writing the model to {src} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        write_model(src, shape, CONTEXT, f16)
        print(f"  {src.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        for type_name in types:
            print(f"quantizing to {type_name} ...", file=sys.stderr, flush=True)
            t = time.perf_counter()
            quantize(src, work / f"{name}-{type_name}.gguf", type_name, threads)
            print(f"  {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    finally:
        src.unlink(missing_ok=True)


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
    # the last token's logits as generation's prefill computes them: the output projection for the last position
    # only (forward() computes it for every prompt token, which no generation does, and with it a float copy of the
    # output projection's weight, a chunk at a time, that would count in the peak memory)
    logits = model._logits(Tensor([prompt]), 0, None, None, last_only=True)[0, -1].numpy()

    def generate() -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        gen = model.generate(prompt, new + 1)
        first = next(gen)
        t1 = time.perf_counter()
        rest = list(gen)
        return t1 - t0, time.perf_counter() - t1, [first, *rest]

    return {**_timed(generate, runs, len(prompt), new), "load_s": load_s, "rss": rss1 - rss0,
            "peak": proc_status("VmHWM"), "logits": logits.tolist(),
            "info": f"CPU_THREADS={os.environ.get('CPU_THREADS', 'default')}"}


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
            "peak": proc_status("VmHWM"), "logits": logits.tolist(),
            "info": f"llama-cpp-python {llama_cpp.__version__}, {threads} threads"}


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


def _pooled(first: dict[str, Any] | str | None, then: dict[str, Any] | str) -> dict[str, Any] | str:
    """A framework's result over the rounds so far: the timed runs of every round, the rest (memory, load time,
    logits, ids) from the first round; a failure replaces it."""
    if first is None or isinstance(then, str) or isinstance(first, str):
        return then
    return {**first, "prefill": first["prefill"] + then["prefill"], "decode": first["decode"] + then["decode"]}


def summary(result: dict[str, Any] | str) -> str:
    """One line of a worker's result for the progress log: a long run shows its numbers as they come."""
    if isinstance(result, str):
        return f"FAILED: {result[-300:]}"
    return (f"load {result['load_s']:.1f} s, RSS added {result['rss'] / 2**20:,.0f} MiB, peak RSS "
            f"{result['peak'] / 2**20:,.0f} MiB, prefill {statistics.median(result['prefill']):.2f} tok/s, decode "
            f"{statistics.median(result['decode']):.2f} tok/s; {result['info']}")


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
        return [f"| {type_name} | {failed.replace('|', '/')} |" + " |" * 11]
    cells = [type_name, f"{size / 2**20:,.0f} MiB"]
    for key in ("prefill", "decode"):
        a, b = statistics.median(ours[key]), statistics.median(cpp[key])
        cells += [f"{a:,.1f}", f"{b:,.1f}", f"{a / b:.2f}x"]
    cells += [f"{ours['rss'] / size:.2f}x / {cpp['rss'] / size:.2f}x",
              f"{ours['peak'] / size:.2f}x / {cpp['peak'] / size:.2f}x",
              f"{ours['load_s']:.1f} / {cpp['load_s']:.1f}", _logit_gap(ours["logits"], cpp["logits"])]
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
    p.add_argument("--rounds", type=int, default=1,
                   help="worker processes per framework, alternated (ours, llama.cpp, ours, ...): their timed runs are "
                        "pooled, so that a busy spell of the machine weighs on both (default 1)")
    p.add_argument("--prompt", type=int, default=None, help="prompt length in tokens (default 128; --quick 16)")
    p.add_argument("--new", type=int, default=None, help="new tokens (default 64; --quick 8)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads of both")
    p.add_argument("--timeout", type=int, default=WORKER_TIMEOUT_S, help="seconds a framework may take per file")
    p.add_argument("--f16", action=argparse.BooleanOptionalAction, default=None,
                   help="write the unquantized model as float16 (default for --shape 8b; float32 otherwise)")
    p.add_argument("--workdir", help="keep the quantized files in this folder and reuse those already there (default: "
                                     "a temporary folder, removed at the end)")
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
    name = args.shape or ("quick" if args.quick else "small")
    f16 = name == "8b" if args.f16 is None else args.f16
    extra = ["--runs", str(args.runs), "--prompt", str(args.prompt), "--new", str(args.new), "--shape", name]
    rows = []
    with contextlib.ExitStack() as stack:
        if args.workdir:
            work = Path(args.workdir)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tg-bench-llm-cpp-")))
        paths = {t: work / f"{name}-{t}.gguf" for t in types}
        make_files(work, name, shape, [t for t in types if not paths[t].exists()], f16, args.threads)
        for type_name in types:
            path = paths[type_name]
            results: dict[str, dict[str, Any] | str] = {}
            for _ in range(args.rounds):
                for fw in ("ours", "cpp"):
                    if isinstance(results.get(fw), str):
                        continue  # failed in an earlier round: the message stands
                    print(f"{type_name}: running {fw} ...", file=sys.stderr, flush=True)
                    cold = {"TINYGRAD_CACHE_DIR": str(work / "kernel-cache")}
                    argv = ["--worker", fw, "--model", str(path), *extra]
                    got = spawn_json(HERE, argv, {**env, **cold}, args.timeout)
                    if fw == "cpp" and isinstance(got, str) and got.startswith("exit -11"):
                        got = f"{got} ({CPP_SEGFAULT.format(flags=AMX_FREE_BUILD)})"
                    print(f"{type_name} {fw}: {summary(got)}", file=sys.stderr, flush=True)
                    results[fw] = _pooled(results.get(fw), got)
            rows += report_rows(type_name, path.stat().st_size, results)
            if not args.workdir:
                path.unlink()
    params = shape["vocab"] * shape["dim"] * 2 + shape["layers"] * (
        2 * shape["dim"] ** 2 + 2 * shape["dim"] * shape["kv_heads"] * shape["dim"] // shape["heads"]
        + 3 * shape["dim"] * shape["ffn"])
    print("\n".join([
        f"# Quantized LLaMA on the CPU: this project against llama.cpp ({'quick, tiny model: ' if args.quick else ''}"
        f"{params / 1e6:.0f}M parameters)", "",
        f"- CPU: {cpu_name()}; {machine_line()}",
        "- shape: " + ", ".join(f"{k} {v}" for k, v in shape.items()) + "; random weights",
        f"- prompt {args.prompt} tokens, then {args.new} new tokens (greedy); median of {args.runs * args.rounds} "
        f"runs ({args.rounds} worker process(es) per framework, alternated, each timing {args.runs} runs after one "
        f"warm-up run); {args.threads} threads each", "",
        "| type | file | prefill tok/s ours | llama.cpp | ratio | decode tok/s ours | llama.cpp | ratio | "
        "RSS added by loading / file (ours / llama.cpp) | peak RSS / file | load s | first token's logits | "
        "greedy ids agreeing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows]))


if __name__ == "__main__":
    main()
