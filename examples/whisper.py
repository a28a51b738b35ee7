"""Speech recognition with a Whisper checkpoint in Hugging Face's layout (a directory with config.json and
model.safetensors, generation_config.json for the language and task tokens, tokenizer.json for text; without a
tokenizer the output is token ids).

    python examples/whisper.py --model path/to/whisper-tiny --audio speech.wav
    python examples/whisper.py --model path/to/whisper-small --audio speech.wav --language de --task translate

The audio is a 16 kHz PCM WAV file (mono, or channels averaged); this example does not resample, so convert other
rates first, e.g. `ffmpeg -i in.mp3 -ar 16000 -ac 1 speech.wav`. Longer audio is cut into the model's 30-second
windows, transcribed as one batch and joined (plainly: a word split at a boundary may be lost). Decoding is greedy:
the prompt runs through the decoder in one call, then each token is one replay of a jitted step over the KV cache
(see tinygrad.nn.whisper).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tinygrad.nn.whisper import SAMPLE_RATE, Whisper, load_tokenizer, load_wav


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", required=True, help="a Hugging Face Whisper directory")
    p.add_argument("--audio", required=True, help="a 16 kHz PCM WAV file")
    p.add_argument("--language", default=None,
                   help="the spoken language of a multilingual model, e.g. en (default: detected)")
    p.add_argument("--task", default=None, choices=["transcribe", "translate"],
                   help="translate: into English (multilingual models; default transcribe)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens per 30-second window (default: as many as the decoder has positions)")
    args = p.parse_args(argv)

    try:
        audio = load_wav(args.audio)
    except (OSError, ValueError) as e:
        sys.exit(str(e))
    model = Whisper.from_pretrained(args.model)
    window = model.n_samples
    clips = [audio[i:i + window] for i in range(0, max(len(audio), 1), window)]
    try:
        start = time.perf_counter()
        ids = model.transcribe(clips, language=args.language, task=args.task, max_new_tokens=args.max_tokens)
        elapsed = time.perf_counter() - start
    except ValueError as e:  # an unknown language or task for this checkpoint, or too many tokens
        sys.exit(str(e))
    tokenizer = load_tokenizer(args.model)
    if tokenizer is not None:
        print(" ".join(tokenizer.decode(row, skip_special_tokens=True).strip() for row in ids))
    else:
        print(" ".join(" ".join(map(str, row)) for row in ids))
    n = sum(len(row) for row in ids)
    print(f"{len(audio) / SAMPLE_RATE:.1f} s of audio, {len(clips)} window(s), {n} tokens in {elapsed:.2f} s "
          f"({n / max(elapsed, 1e-9):.1f} tokens/s, the encoder included)", file=sys.stderr)


if __name__ == "__main__":
    main()
