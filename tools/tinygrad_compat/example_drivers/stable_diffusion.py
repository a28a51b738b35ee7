"""examples/stable_diffusion.py: the example's StableDiffusion with a tiny UNet (its module-level unet_params: 32
channels, multipliers 1 and 2, one block each, 2 heads, attention at both levels), the v1 CLIP text model cut to
2 layers and a 1000-token vocabulary (width 768 as the UNet's context), and the VAE decoder at its real width on a
4x4 latent. Runs CLIP on a prompt and on the empty prompt, two jitted DDIM steps with classifier-free guidance
(the example's `run`), then post_quant_conv + decoder + the example's scaling to uint8.
Outputs: both CLIP contexts, the latent after each step and the decoded image (before its cast to uint8, / 255)."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save

# the UNet's timestep embedding is rounded to half: sin/cos of timesteps in the hundreds differ in float32's last
# bits between the two, which a half rounding can turn into one half ulp; guidance (7.5x) and the decoder amplify it
RTOL = 1e-3
ATOL = 1e-3

TINY_UNET = {"adm_in_ch": None, "in_ch": 4, "out_ch": 4, "model_ch": 32, "attention_resolutions": [1, 2],
             "num_res_blocks": 1, "channel_mult": [1, 2], "n_heads": 2, "transformer_depth": [1, 1],
             "ctx_dim": 768, "use_linear": False}
LATENT = 4  # the latent's side; the decoder makes an image 8 times larger


def main(out: str) -> None:
    from tinygrad import Tensor, TinyJit, nn
    from tinygrad.helpers import profile_marker
    from tinygrad.nn.state import load_state_dict

    import examples.stable_diffusion as sd
    sd.unet_params.clear()
    sd.unet_params.update(TINY_UNET)
    profile_marker("create model")
    model = sd.StableDiffusion()
    text = model.cond_stage_model.transformer.text_model
    text.encoder.layers = text.encoder.layers[:2]
    text.embeddings.token_embedding = nn.Embedding(1000, 768)
    model.first_stage_model.encoder = None  # only decoding is run
    weights = {k: v for k, v in numpy_weights(model, seed=21, scale=0.5).items() if k != "alphas_cumprod"}
    load_state_dict(model, weights, strict=False, verbose=False)

    rng = np.random.default_rng(22)
    prompt = [[49 + int(t) for t in rng.integers(0, 900, 8)] + [999] * 69]  # 77 ids, padded as CLIP pads
    empty = [[49, 999] + [999] * 75]
    context = text(Tensor(prompt)).realize()
    unconditional_context = text(Tensor(empty)).realize()

    timesteps = list(range(1, 1000, 1000 // 2))
    alphas = model.alphas_cumprod[Tensor(timesteps)]
    alphas_prev = Tensor([1.0]).cat(alphas[:-1])
    start = Tensor(rng.standard_normal((1, 4, LATENT, LATENT)).astype(np.float32)).realize()

    @TinyJit
    def run(model, *x):
        return model(*x).realize()

    def diffuse() -> list[np.ndarray]:
        latent, latents = start, []
        for index, timestep in list(enumerate(timesteps))[::-1]:
            tid = Tensor([index])
            latent = run(model, unconditional_context, context, latent, Tensor([timestep]), alphas[tid],
                         alphas_prev[tid], Tensor([7.5]))
            latents.append(latent.numpy())
        return latents

    diffuse()
    t0 = time.perf_counter()
    latents = diffuse()
    seconds = time.perf_counter() - t0

    # StableDiffusion.decode, whose reshape is fixed to a 512x512 image: its steps at this latent size
    x = model.first_stage_model.post_quant_conv(1 / 0.18215 * Tensor(latents[-1]))
    x = model.first_stage_model.decoder(x)
    image = ((x + 1.0) / 2.0).reshape(3, 8 * LATENT, 8 * LATENT).permute(1, 2, 0).clip(0, 1) * 255
    save(out, seconds, context=context.numpy(), unconditional_context=unconditional_context.numpy(),
         latents=np.stack(latents), image=image.numpy() / 255.0)


if __name__ == "__main__":
    main(sys.argv[1])
