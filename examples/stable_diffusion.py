"""Text to image with a Stable Diffusion 1.x checkpoint in diffusers' layout (a folder with model_index.json,
text_encoder/, unet/, vae/, tokenizer/ with vocab.json and merges.txt, optionally scheduler/; weights as safetensors).

    python examples/stable_diffusion.py --model path/to/stable-diffusion-v1-5 --prompt "a red fox in snow" \\
        --steps 20 --seed 0 --guidance 7.5 --out fox.png
    python examples/stable_diffusion.py --model ... --fp16        # UNet and VAE in float16

The prompt is tokenized with CLIP's BPE (built with the `tokenizers` package), encoded by the CLIP text encoder, and
DDIM (eta 0) or Euler (--sampler euler), with the folder's scheduler settings, runs the UNet with classifier-free
guidance: one batched call per step on the empty prompt and the prompt, the step being a TinyJit replay after the
first two. The VAE decodes the latents and the image is written as a PNG with the stdlib's zlib (see
tinygrad.nn.diffusion).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tinygrad import Device, Tensor, dtypes
from tinygrad.nn.diffusion import StableDiffusion, to_uint8, write_png


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", required=True, help="a diffusers Stable Diffusion 1.x folder")
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative-prompt", default="", help="what guidance steers away from (default: the empty prompt)")
    p.add_argument("--steps", type=int, default=20, help="sampling steps (default 20)")
    p.add_argument("--sampler", default="ddim", choices=["ddim", "euler"], help="DDIM (eta 0) or Euler (default ddim)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial noise (numpy's default_rng)")
    p.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance scale; 1 turns it off")
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--fp16", action="store_true", help="run the UNet and VAE in float16 (needs device support)")
    p.add_argument("--out", default="out.png", help="the PNG to write (default out.png)")
    args = p.parse_args(argv)
    if args.steps < 1:
        sys.exit(f"--steps must be at least 1, got {args.steps}")
    if args.height % 8 or args.width % 8 or args.height < 8 or args.width < 8:
        sys.exit(f"--height and --width must be positive multiples of 8, got {args.height}x{args.width}")

    dtype = dtypes.float32
    if args.fp16:
        if not Device[Device.DEFAULT].renderer.supports_dtype(dtypes.float16):
            sys.exit(f"--fp16: device {Device.DEFAULT} cannot run float16; drop the flag to run in float32")
        dtype = dtypes.float16

    t0 = time.perf_counter()
    try:
        sd = StableDiffusion.from_pretrained(args.model, dtype=dtype, scheduler=args.sampler)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"cannot load {args.model}: {e}")
    if sd.tokenizer is None:
        sys.exit(f"{args.model}/tokenizer has no vocab.json and merges.txt: the prompt cannot be tokenized")
    print(f"loaded in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    import numpy as np
    ids = [sd.tokenize(args.prompt)] if args.guidance == 1.0 else \
        [sd.tokenize(args.negative_prompt), sd.tokenize(args.prompt)]
    context = sd.encode_ids(ids)
    noise = np.random.default_rng(args.seed).standard_normal(
        (1, sd.latent_channels, args.height // 8, args.width // 8)).astype(np.float32)
    t1 = time.perf_counter()
    last = [t1]

    def progress(i: int, t: float, _x: Tensor) -> None:
        now = time.perf_counter()
        print(f"step {i + 1}/{args.steps} (t={t:g}) {now - last[0]:.2f} s", file=sys.stderr)
        last[0] = now

    latents = sd.sample(context, Tensor(noise), args.steps, args.guidance, callback=progress)
    t2 = time.perf_counter()
    image = to_uint8(sd.vae.decode(latents.cast(sd.dtype)))
    t3 = time.perf_counter()
    write_png(args.out, image)
    print(f"sampling {t2 - t1:.1f} s ({(t2 - t1) / args.steps:.2f} s/step), decode {t3 - t2:.1f} s; wrote {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
