"""LLaMA inference on the CPU: this project (tinygrad.nn.transformer.Llama) against transformers on PyTorch.

    python bench/llm.py             # ~100M parameters, float32: a few minutes on 2 cores
    python bench/llm.py --quick     # a tiny model: checks that the bench runs; its numbers mean nothing
    python bench/llm.py --layers 4  # the same shapes with fewer layers (--runs, --prompt, --new, --threads too)

The model is a LLaMA of random weights that transformers' LlamaConfig initialises (seeded) and save_pretrained
writes to a temporary directory as float32 safetensors: hidden 768, 12 layers, 12 heads with 4 key/value heads,
intermediate 2048, vocabulary 32000, embeddings tied (about 100M parameters). Both frameworks load that directory.

Each framework runs in a process of its own, one after the other (their thread pools never compete): it loads the
model, runs one generation to warm up (this project compiles its kernels and captures its decode step there, from
an empty kernel cache; its time is reported apart, as what a first request costs), then times `--runs` generations
of the same seeded random prompt and reports medians:
- prefill: the prompt (128 tokens) in one forward up to the first new token's id; tokens/s = prompt length / time;
- decode: the next 64 tokens one at a time, greedy, with the KV cache; tokens/s = 64 / time. This project runs
  `Llama.generate` (a jitted decode step); PyTorch runs the same loop by hand (forward with past_key_values,
  argmax), which skips generate()'s per-step bookkeeping, in torch.inference_mode.
Memory: VmRSS of the process (/proc/self/status) before and after loading, against the bytes of the weights in the
checkpoint; VmHWM is the peak while loading. Greedy ids of the two frameworks are compared as a sanity check
(random weights give near-ties, so a late divergence is rounding, not a bug).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envs import cpu_name
from harness import machine_line, proc_status, spawn_json, thread_env

HERE = Path(__file__).resolve()
FULL: dict[str, Any] = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                        "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 32000,
                        "max_position_embeddings": 2048}
QUICK: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
                         "max_position_embeddings": 256}
WORKER_TIMEOUT_S = 1800


# ---- the model ------------------------------------------------------------------------------------------------------

def make_model(directory: Path, shape: dict[str, Any]) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(**shape, tie_word_embeddings=True, bos_token_id=1, eos_token_id=None)
    transformers.LlamaForCausalLM(config).float().save_pretrained(directory, safe_serialization=True)


def weight_bytes(directory: Path) -> tuple[int, int]:
    """(bytes, parameters) of the tensors in model.safetensors, from its header."""
    with open(directory / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = params = 0
    sizes = {"F32": 4, "F16": 2, "BF16": 2}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        total += end - start
        params += (end - start) // sizes[info["dtype"]]
    return total, params


# ---- the workers ----------------------------------------------------------------------------------------------------

def _prompt(vocab: int, n: int) -> list[int]:
    import numpy as np

    return np.random.default_rng(0).integers(2, vocab, n).tolist()


def run_ours(directory: Path, prompt: list[int], new: int, runs: int) -> dict[str, Any]:
    from tinygrad import Device
    from tinygrad.nn.transformer import Llama

    rss0 = proc_status("VmRSS")
    t = time.perf_counter()
    model = Llama.from_pretrained(directory, max_context=len(prompt) + new + 8)
    load_s = time.perf_counter() - t
    rss1, hwm = proc_status("VmRSS"), proc_status("VmHWM")

    def generate() -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        gen = model.generate(prompt, new + 1)
        first = next(gen)
        t1 = time.perf_counter()
        rest = list(gen)
        return t1 - t0, time.perf_counter() - t1, [first, *rest]

    threads = os.environ.get("CPU_THREADS") or str(len(os.sched_getaffinity(0)))
    return {**_timed_runs(generate, runs, len(prompt), new), "load_s": load_s, "rss_before": rss0,
            "rss_after": rss1, "hwm": hwm, "rss_after_runs": proc_status("VmRSS"),
            "info": f"DEV={Device.DEFAULT}, {threads} threads"}


def _timed_runs(generate: Callable[[], tuple[float, float, list[int]]], runs: int, prompt_len: int,
                new: int) -> dict[str, Any]:
    """`runs` + 1 generations; `generate()` gives the seconds to the first token (the prefill), the seconds for
    the `new` tokens after it, and the ids. The first run compiles, captures or warms up: timed apart."""
    prefill: list[float] = []
    decode: list[float] = []
    warmup, ids = 0.0, []
    for i in range(runs + 1):
        first_s, rest_s, ids = generate()
        if i:
            prefill.append(prompt_len / first_s)
            decode.append(new / rest_s)
        else:
            warmup = first_s + rest_s
    return {"prefill": prefill, "decode": decode, "ids": ids, "warmup_s": warmup}


def run_torch(directory: Path, prompt: list[int], new: int, runs: int) -> dict[str, Any]:
    import torch
    import transformers

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model_class = transformers.LlamaForCausalLM  # imported now (transformers imports lazily), not counted as weights
    rss0 = proc_status("VmRSS")
    t = time.perf_counter()
    model = model_class.from_pretrained(directory, dtype=torch.float32).eval()
    load_s = time.perf_counter() - t
    rss1, hwm = proc_status("VmRSS"), proc_status("VmHWM")
    x = torch.tensor([prompt])

    def generate() -> tuple[float, float, list[int]]:
        t0 = time.perf_counter()
        out = model(x, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t1 = time.perf_counter()
        past, got = out.past_key_values, [int(nxt)]
        for _ in range(new):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            got.append(int(nxt))
        return t1 - t0, time.perf_counter() - t1, got

    with torch.inference_mode():
        timed = _timed_runs(generate, runs, len(prompt), new)
    return {**timed, "load_s": load_s, "rss_before": rss0, "rss_after": rss1, "hwm": hwm,
            "rss_after_runs": proc_status("VmRSS"),
            "info": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                    f"{torch.get_num_threads()} threads"}


def worker(args: argparse.Namespace) -> None:
    directory = Path(args.model)
    vocab = json.loads((directory / "config.json").read_text())["vocab_size"]
    prompt = _prompt(vocab, args.prompt)
    run = run_ours if args.worker == "ours" else run_torch
    result = run(directory, prompt, args.new, args.runs)
    print(json.dumps(result))


# ---- the parent -----------------------------------------------------------------------------------------------------

def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _spread(values: list[float]) -> str:
    return f"{(max(values) - min(values)) / statistics.median(values):.0%}" if values else "-"


def report(results: dict[str, dict[str, Any] | str], nbytes: int, params: int, args: argparse.Namespace,
           shape: dict[str, int]) -> str:
    names = {"ours": "this project", "torch": "transformers + PyTorch"}
    ok = {k: v for k, v in results.items() if isinstance(v, dict)}
    out = [f"# LLaMA on the CPU ({'quick, tiny model' if args.quick else f'{params / 1e6:.0f}M parameters'})", "",
           f"- CPU: {cpu_name()}; {machine_line()}",
           f"- model: {params / 1e6:.1f}M parameters, float32, {_mib(nbytes)} of weights; "
           + ", ".join(f"{k} {v}" for k, v in shape.items()),
           f"- prompt {args.prompt} tokens, then {args.new} new tokens (greedy); median of {args.runs} runs "
           f"after one warm-up run"]
    out += [f"- {names[k]}: {v['info']}" for k, v in ok.items()]
    out += [f"- {names[k]}: FAILED: {v}" for k, v in results.items() if isinstance(v, str)]
    out += ["", "| tokens/s (higher is better) | this project | spread | transformers + PyTorch | spread | "
                "this project / PyTorch |", "|---|---|---|---|---|---|"]
    for key, label in (("prefill", f"prefill, {args.prompt}-token prompt"), ("decode", f"decode, {args.new} tokens")):
        cells = []
        med = {}
        for fw in ("ours", "torch"):
            r = ok.get(fw)
            if r:
                med[fw] = statistics.median(r[key])
                cells += [f"{med[fw]:,.1f}", _spread(r[key])]
            else:
                cells += ["-", "-"]
        ratio = f"{med['ours'] / med['torch']:.2f}x" if len(med) == 2 else "-"
        out.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    out += ["", "| time and memory (lower is better) | this project | transformers + PyTorch | "
                "this project / PyTorch |", "|---|---|---|---|"]
    rows = [("load time", lambda r: r["load_s"], lambda v: f"{v:.1f} s"),
            ("first generation (compiles, captures the decode step)", lambda r: r["warmup_s"],
             lambda v: f"{v:.1f} s"),
            ("RSS added by loading", lambda r: r["rss_after"] - r["rss_before"], _mib),
            ("... / weight bytes", lambda r: (r["rss_after"] - r["rss_before"]) / nbytes, lambda v: f"{v:.2f}x"),
            ("peak RSS while loading (VmHWM)", lambda r: r["hwm"], _mib),
            ("RSS after the runs", lambda r: r["rss_after_runs"], _mib)]
    for label, get, fmt in rows:
        vals = {fw: get(ok[fw]) for fw in ("ours", "torch") if fw in ok}
        ratio = f"{vals['ours'] / vals['torch']:.2f}x" if len(vals) == 2 and vals["torch"] else "-"
        out.append(f"| {label} | {fmt(vals['ours']) if 'ours' in vals else '-'} | "
                   f"{fmt(vals['torch']) if 'torch' in vals else '-'} | {ratio} |")
    if len(ok) == 2:
        a, b = ok["ours"]["ids"], ok["torch"]["ids"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        out += ["", f"Greedy ids: the first {same} of {len(a)} agree between the two frameworks."]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny model, a short prompt: a smoke test")
    p.add_argument("--runs", type=int, default=None, help="timed runs per framework (default 3; --quick 2)")
    p.add_argument("--prompt", type=int, default=None, help="prompt length in tokens (default 128; --quick 16)")
    p.add_argument("--new", type=int, default=None, help="new tokens (default 64; --quick 8)")
    p.add_argument("--threads", type=int, default=None, help="pin both frameworks' CPU threads (default: theirs)")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers (default 12; --quick 2)")
    p.add_argument("--timeout", type=int, default=WORKER_TIMEOUT_S,
                   help=f"seconds a framework may take, warm-up included (default {WORKER_TIMEOUT_S})")
    p.add_argument("--frameworks", default="ours,torch", help="comma-separated: ours, torch")
    p.add_argument("--worker", choices=["ours", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--make", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.runs = args.runs or (2 if args.quick else 3)
    args.prompt = args.prompt or (16 if args.quick else 128)
    args.new = args.new or (8 if args.quick else 64)
    shape = dict(QUICK if args.quick else FULL)
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    if args.make:
        make_model(Path(args.make), shape)
        return
    if args.worker:
        worker(args)
        return
    env = {"DEV": "CPU", **thread_env(args.threads)}
    with tempfile.TemporaryDirectory(prefix="tg-bench-llm-") as tmp:
        directory = Path(tmp) / "llama"
        print(f"making the model in {directory} ...", file=sys.stderr, flush=True)
        made = spawn_json(HERE, ["--make", str(directory), *(["--quick"] if args.quick else []),
                                 *(["--layers", str(args.layers)] if args.layers else [])], env, args.timeout)
        if isinstance(made, str):
            sys.exit(f"could not make the model with transformers: {made}")
        nbytes, params = weight_bytes(directory)
        results: dict[str, dict[str, Any] | str] = {}
        for fw in [f.strip() for f in args.frameworks.split(",") if f.strip()]:
            print(f"running {fw} ...", file=sys.stderr, flush=True)
            # an empty kernel cache: the first generation then costs what it costs on a new machine
            cold = {"TINYGRAD_CACHE_DIR": str(Path(tmp) / "kernel-cache")}
            argv = ["--worker", fw, "--model", str(directory), "--runs", str(args.runs), "--prompt", str(args.prompt),
                      "--new", str(args.new)]
            results[fw] = spawn_json(HERE, argv, {**env, **cold}, args.timeout)
    print(report(results, nbytes, params, args, shape))


if __name__ == "__main__":
    main()
