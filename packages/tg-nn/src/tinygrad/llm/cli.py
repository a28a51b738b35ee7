"""`python -m tinygrad.llm`: serve a model over HTTP (the default), or chat with it in the terminal (--chat)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from tinygrad import Tensor
from tinygrad.llm.engine import ChatTemplateError, Engine

EXIT_WORDS = ("/exit", "/quit")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tinygrad.llm",
                                description="Serve a language model with an OpenAI-compatible API and a chat page "
                                            "(or chat in the terminal with --chat).")
    p.add_argument("--model", required=True,
                   help="a Hugging Face model directory (GPT-2, LLaMA, Qwen2) or a llama.cpp .gguf file")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="the port (0: a free one; default 8000)")
    p.add_argument("--chat", action="store_true", help="chat in the terminal instead of serving (stdin/stdout)")
    p.add_argument("--max-context", type=int, default=None,
                   help="KV cache length in tokens (default: the model's limit, at most 4096)")
    p.add_argument("--tokenizer", default=None, help="a tokenizer.json to use instead of the model's own")
    p.add_argument("--name", default=None, help="the model id of the API (default: the directory or file name)")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    p.add_argument("--max-queue", type=int, default=None,
                   help="requests that may wait while one generates; more are answered 503 (default 8)")
    p.add_argument("--benchmark", action="store_true",
                   help="measure prefill and decode speed in tokens/s (greedy, after a warm-up run) and exit")
    p.add_argument("--benchmark-prompt", type=int, default=128, metavar="N",
                   help="prompt length of --benchmark in tokens (default 128)")
    p.add_argument("--benchmark-tokens", type=int, default=64, metavar="N",
                   help="tokens --benchmark generates (default 64)")
    chat = p.add_argument_group("terminal chat (--chat)")
    chat.add_argument("--system", default=None, help="a system message starting the conversation")
    chat.add_argument("--temperature", type=float, default=0.7, help="0: greedy (default 0.7)")
    chat.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1: off)")
    chat.add_argument("--max-tokens", type=int, default=512, help="the longest answer in tokens (default 512)")
    chat.add_argument("--seed", type=int, default=None, help="seed of the sampler")
    return p.parse_args(argv)


def _fit(engine: Engine, history: list[dict[str, str]], reserve: int) -> list[int] | None:
    """The prompt ids of the conversation, dropping its oldest turns (not the system message) until `reserve`
    tokens are left for the answer; None when even the last message alone does not fit."""
    while True:
        ids = engine.encode(engine.chat_prompt(history), add_special_tokens=False)
        if len(ids) + reserve <= engine.max_context:
            return ids
        first = 1 if history and history[0]["role"] == "system" else 0
        if len(history) - first <= 1:
            return ids if len(ids) < engine.max_context else None
        del history[first]


def chat_loop(engine: Engine, stdin: TextIO, stdout: TextIO, temperature: float = 0.7, top_p: float = 1.0,
              max_tokens: int = 512, system: str | None = None) -> int:
    """Read a message per line, print each answer as it is generated (then a newline). Ends on end of input or a
    line "/exit"; "/reset" forgets the conversation. The "> " prompt and help are shown only on a terminal."""
    interactive = stdin.isatty()
    start = [{"role": "system", "content": system}] if system else []
    history = list(start)
    reserve = max(1, min(max_tokens, engine.max_context // 2))
    if interactive:
        print(f"chatting with {engine.name} (/reset starts over, /exit or Ctrl-D quits)", file=sys.stderr)
    while True:
        if interactive:
            stdout.write("> ")
            stdout.flush()
        try:
            line = stdin.readline()
        except KeyboardInterrupt:
            break
        if not line:
            break
        text = line.rstrip("\r\n")
        command = text.strip()
        if command in EXIT_WORDS:
            break
        if command == "/reset":
            history = list(start)
            continue
        if not command:
            continue
        history.append({"role": "user", "content": text})
        try:
            ids = _fit(engine, history, reserve)
        except ChatTemplateError as e:
            print(f"error: {e}", file=sys.stderr)
            history.pop()
            continue
        if ids is None:
            print(f"error: that message is longer than the context of {engine.max_context} tokens", file=sys.stderr)
            history.pop()
            continue
        answer = []
        pieces = engine.stream(ids, max_tokens, temperature=temperature, top_p=top_p, stop=engine.chat_stops)
        try:
            for piece in pieces:
                stdout.write(piece.text)
                stdout.flush()
                answer.append(piece.text)
        except KeyboardInterrupt:
            pass  # Ctrl-C cuts the answer short; the conversation goes on
        finally:
            pieces.close()
        stdout.write("\n")
        stdout.flush()
        history.append({"role": "assistant", "content": "".join(answer)})
    return 0


def _load(args: argparse.Namespace) -> Engine:
    from tinygrad.llm.loader import load_engine

    started = time.perf_counter()
    engine = load_engine(args.model, max_context=args.max_context, tokenizer=args.tokenizer, name=args.name)
    template = "its chat template" if engine.has_template else "a plain 'User:/Assistant:' chat format"
    print(f"tinygrad.llm: loaded {engine.name} in {time.perf_counter() - started:.1f} s (context "
          f"{engine.max_context} tokens, {template})", file=sys.stderr)
    return engine


def benchmark(engine: Engine, prompt_tokens: int, new_tokens: int, runs: int = 2) -> tuple[float, float]:
    """(prefill, decode) speed in tokens/s of the last of `runs` greedy generations (the first ones compile): the
    prompt's tokens over the time to the first new token, then the other new tokens over the time they took. End
    of text is not a stop here, so every run decodes the same number of tokens."""
    if not 1 <= prompt_tokens < engine.max_context:
        raise ValueError(f"--benchmark-prompt must be from 1 to {engine.max_context - 1} (the context), got "
                         f"{prompt_tokens}")
    new_tokens = min(new_tokens, engine.max_context - prompt_tokens)
    if new_tokens < 2:
        raise ValueError("--benchmark-tokens must be 2 or more, and fit in the context after the prompt")
    seed = engine.encode("The quick brown fox jumps over the lazy dog.", add_special_tokens=False) or [0]
    ids = (seed * (prompt_tokens // len(seed) + 1))[:prompt_tokens]
    prefill = decode = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        first, n = start, 0
        for _token in engine.model.generate(ids, new_tokens, 0.0, 0, 1.0, ()):
            n += 1
            if n == 1:
                first = time.perf_counter()
        end = time.perf_counter()
        prefill = prompt_tokens / max(first - start, 1e-9)
        decode = (n - 1) / max(end - first, 1e-9)
    return prefill, decode


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        engine = _load(args)
    except (OSError, ValueError, ImportError) as e:
        print(f"tinygrad.llm: cannot load {args.model}: {e}", file=sys.stderr)
        return 2
    if args.benchmark:
        try:
            prefill, decode = benchmark(engine, args.benchmark_prompt, args.benchmark_tokens)
        except ValueError as e:
            print(f"tinygrad.llm: {e}", file=sys.stderr)
            return 2
        print(f"prefill: {prefill:.1f} tokens/s ({args.benchmark_prompt} prompt tokens)")
        print(f"decode:  {decode:.1f} tokens/s")
        return 0
    if args.chat:
        if args.seed is not None:
            Tensor.manual_seed(args.seed)  # once: every answer continues the same sequence of draws
        return chat_loop(engine, sys.stdin, sys.stdout, args.temperature, args.top_p, args.max_tokens, args.system)
    from tinygrad.llm.server import LLMServer, is_loopback

    try:
        server = LLMServer(engine, args.host, args.port, log=not args.quiet,
                           **({} if args.max_queue is None else {"max_queue": args.max_queue}))
    except ValueError as e:
        print(f"tinygrad.llm: {e}; pass --max-queue 0 or more", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tinygrad.llm: cannot listen on {args.host}:{args.port}: {e}; choose another --port",
              file=sys.stderr)
        return 2
    try:  # from here on Ctrl-C stops the server, also when it comes before wait() has started
        if not is_loopback(args.host):
            print(f"tinygrad.llm: listening on {args.host}, reachable from other machines, without authentication",
                  file=sys.stderr)
        print(f"tinygrad.llm: serving {engine.name} at {server.url} (chat page; the API is at {server.url}v1); "
              f"Ctrl-C stops", file=sys.stderr, flush=True)
        server.wait()
    except KeyboardInterrupt:
        print("tinygrad.llm: stopped", file=sys.stderr)
        server.stop()
    return 0


def run(argv: Any = None) -> None:
    sys.exit(main(argv))
