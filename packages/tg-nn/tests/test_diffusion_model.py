"""Stable Diffusion 1.x pieces (tinygrad.nn.diffusion) against transformers' CLIPTextModel and diffusers'
UNet2DConditionModel / AutoencoderKL / DDIMScheduler, at tiny random sizes saved as a diffusers pipeline folder."""

from __future__ import annotations

import json
import pathlib
import struct
import zlib
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

from tinygrad import Tensor  # noqa: E402
from tinygrad.nn.diffusion import (  # noqa: E402
    AutoencoderKLDecoder,
    CLIPTextModel,
    DDIMScheduler,
    StableDiffusion,
    UNet2DConditionModel,
    load_clip_tokenizer,
    load_component_weights,
    write_png,
)

TEXT = dict(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=16, hidden_act="quick_gelu", bos_token_id=98, eos_token_id=99, pad_token_id=99)
UNET = dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32, attention_head_dim=2, norm_num_groups=8)
VAE = dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32), layers_per_block=1,
           norm_num_groups=8, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
           sample_size=16)


def _randomize(module: Any, seed: int) -> None:
    """Random non-trivial weights (diffusers zero-initialises some output projections, which would hide errors)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.5 / max(1, p[0].numel()) ** 0.5 if p.ndim > 1 else 0.1))


MERGES = ["c a", "ca t</w>", "d o", "do g</w>", "t h", "th e</w>", "r e", "re d</w>", "o n</w>"]


def _write_clip_vocab(d: pathlib.Path) -> None:
    """A small CLIP-style BPE vocabulary: GPT-2's byte alphabet, each symbol also as a word end, a few merges, then
    the two special tokens (so they get the last ids, as in CLIP's)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    chars = [chr(c) for c in cs]
    tokens = chars + [c + "</w>" for c in chars] + ["".join(m.split()) for m in MERGES]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    d.mkdir()
    (d / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(MERGES) + "\n")


@pytest.fixture(scope="module")
def pipe_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("sd_tiny")
    torch.manual_seed(0)
    te = transformers.CLIPTextModel(transformers.CLIPTextConfig(**TEXT)).eval()
    unet = diffusers.UNet2DConditionModel(**UNET).eval()
    vae = diffusers.AutoencoderKL(**VAE).eval()
    for i, m in enumerate((te, unet, vae)):
        _randomize(m, i)
    te.save_pretrained(root / "text_encoder", safe_serialization=True)
    unet.save_pretrained(root / "unet", safe_serialization=True)
    vae.save_pretrained(root / "vae", safe_serialization=True)
    diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                            set_alpha_to_one=False, steps_offset=1).save_pretrained(root / "scheduler")
    _write_clip_vocab(root / "tokenizer")
    (root / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    return root


@pytest.fixture(scope="module")
def torch_models(pipe_dir: pathlib.Path) -> tuple[object, object, object]:
    te = transformers.CLIPTextModel.from_pretrained(pipe_dir / "text_encoder").eval()
    unet = diffusers.UNet2DConditionModel.from_pretrained(pipe_dir / "unet").eval()
    vae = diffusers.AutoencoderKL.from_pretrained(pipe_dir / "vae").eval()
    return te, unet, vae


def _cfg(d: pathlib.Path) -> dict:
    return json.loads((d / "config.json").read_text())


def test_text_encoder_matches_transformers(pipe_dir, torch_models):
    ids = np.array([[98, 5, 17, 42, 99, 99, 99, 99], [98, 63, 2, 99, 99, 99, 99, 99]], dtype=np.int32)
    ours = CLIPTextModel(_cfg(pipe_dir / "text_encoder"))
    load_component_weights(ours, pipe_dir / "text_encoder")
    with torch.no_grad():
        ref = torch_models[0](torch.from_numpy(ids).long()).last_hidden_state.numpy()
    np.testing.assert_allclose(ours(Tensor(ids)).numpy(), ref, atol=2e-4, rtol=2e-4)


def test_unet_matches_diffusers(pipe_dir, torch_models):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 16, 16)).astype(np.float32)
    ctx = rng.standard_normal((2, 16, 32)).astype(np.float32)
    ours = UNet2DConditionModel(_cfg(pipe_dir / "unet"))
    load_component_weights(ours, pipe_dir / "unet")
    with torch.no_grad():
        ref = torch_models[1](torch.from_numpy(x), torch.tensor([501.0, 501.0]), torch.from_numpy(ctx)).sample.numpy()
    got = ours(Tensor(x), Tensor([501.0]), Tensor(ctx)).numpy()
    np.testing.assert_allclose(got, ref, atol=2e-3 * float(np.abs(ref).max()), rtol=1e-3)


def test_vae_decode_matches_diffusers(pipe_dir, torch_models):
    z = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    ours = AutoencoderKLDecoder(_cfg(pipe_dir / "vae"))
    load_component_weights(ours, pipe_dir / "vae")
    assert ours.scaling_factor == pytest.approx(0.18215)
    with torch.no_grad():
        ref = torch_models[2].decode(torch.from_numpy(z) / 0.18215).sample.numpy()
    got = ours.decode(Tensor(z)).numpy()
    assert got.shape == (1, 3, 16, 16)  # one upsampler between the two block widths
    np.testing.assert_allclose(got, ref, atol=2e-3 * float(np.abs(ref).max()), rtol=1e-3)


def test_vae_decode_float16(pipe_dir, torch_models):
    from tinygrad import Device, dtypes
    if not Device[Device.DEFAULT].renderer.supports_dtype(dtypes.float16):
        pytest.skip(f"device {Device.DEFAULT} has no float16")
    z = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    ours = AutoencoderKLDecoder(_cfg(pipe_dir / "vae"))
    load_component_weights(ours, pipe_dir / "vae", dtypes.float16)
    assert ours.decoder.conv_in.weight.dtype == dtypes.float16 and ours.decoder.up_blocks[0].resnets[0].norm1.weight \
        .dtype == dtypes.float16
    out = ours.decode(Tensor(z).cast(dtypes.float16))
    assert out.dtype == dtypes.float16
    with torch.no_grad():
        ref = torch_models[2].decode(torch.from_numpy(z) / 0.18215).sample.numpy()
    np.testing.assert_allclose(out.float().numpy(), ref, atol=2e-2 * float(np.abs(ref).max()))


def test_ddim_timesteps_and_coefficients_match_diffusers():
    ref = diffusers.DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  set_alpha_to_one=False, steps_offset=1, clip_sample=False)
    ours = DDIMScheduler.from_config(dict(ref.config))
    for steps in (3, 20, 50):
        ref.set_timesteps(steps)
        assert ours.timesteps(steps) == ref.timesteps.tolist()
    np.testing.assert_allclose(ours.alphas_cumprod, ref.alphas_cumprod.numpy(), rtol=1e-5)


def test_ddim_guided_sampling_matches_diffusers(pipe_dir, torch_models):
    te, unet, _ = torch_models
    # [unconditional, conditional], padded to the encoder's length as the pipeline does (and the shapes of the other
    # tests, whose compiled kernels this one then reuses)
    ids = [[98] + [99] * 15, [98, 7, 21] + [99] * 13]
    noise = np.random.default_rng(3).standard_normal((1, 4, 16, 16)).astype(np.float32)
    steps, guidance = 3, 5.0
    sd = StableDiffusion.from_pretrained(pipe_dir)
    got = sd.sample(sd.encode_ids(ids), Tensor(noise), steps, guidance).numpy()

    sched = diffusers.DDIMScheduler.from_pretrained(pipe_dir / "scheduler")
    sched.set_timesteps(steps)
    with torch.no_grad():
        ctx = te(torch.tensor(ids)).last_hidden_state
        x = torch.from_numpy(noise) * sched.init_noise_sigma
        for t in sched.timesteps:
            eps = unet(torch.cat([x, x]), t, ctx).sample
            uncond, cond = eps.chunk(2)
            x = sched.step(uncond + guidance * (cond - uncond), t, x).prev_sample
    ref = x.numpy()
    np.testing.assert_allclose(got, ref, atol=2e-3 * float(np.abs(ref).max()), rtol=1e-3)


def test_euler_guided_sampling_matches_diffusers(pipe_dir, torch_models):
    te, unet, _ = torch_models
    ids = [[98] + [99] * 15, [98, 7, 21] + [99] * 13]
    noise = np.random.default_rng(5).standard_normal((1, 4, 16, 16)).astype(np.float32)
    steps, guidance = 3, 5.0
    sd = StableDiffusion.from_pretrained(pipe_dir, scheduler="euler")
    got = sd.sample(sd.encode_ids(ids), Tensor(noise), steps, guidance).numpy()

    sched = diffusers.EulerDiscreteScheduler.from_pretrained(pipe_dir / "scheduler")
    sched.set_timesteps(steps)
    assert sd.scheduler.timesteps(steps) == sched.timesteps.tolist()
    with torch.no_grad():
        ctx = te(torch.tensor(ids)).last_hidden_state
        x = torch.from_numpy(noise) * sched.init_noise_sigma
        for t in sched.timesteps:
            x_in = sched.scale_model_input(torch.cat([x, x]), t)
            uncond, cond = unet(x_in, t, ctx).sample.chunk(2)
            x = sched.step(uncond + guidance * (cond - uncond), t, x).prev_sample
    ref = x.numpy()
    np.testing.assert_allclose(got, ref, atol=2e-3 * float(np.abs(ref).max()), rtol=1e-3)


def test_missing_weights_are_named(pipe_dir, tmp_path):
    (tmp_path / "config.json").write_text((pipe_dir / "vae" / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_component_weights(AutoencoderKLDecoder(_cfg(tmp_path)), tmp_path)
    with pytest.raises(KeyError, match="lack"):  # UNet weights do not fit a VAE
        load_component_weights(AutoencoderKLDecoder(_cfg(tmp_path)), pipe_dir / "unet")


def test_write_png_roundtrip(tmp_path):
    img = np.random.default_rng(4).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    out = tmp_path / "x.png"
    write_png(out, img)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (7, 5)
    idat_len = struct.unpack(">I", data[33:37])[0]
    rows = zlib.decompress(data[41:41 + idat_len])
    np.testing.assert_array_equal(np.frombuffer(rows, np.uint8).reshape(5, 1 + 21)[:, 1:].reshape(5, 7, 3), img)
    with pytest.raises(ValueError, match="uint8"):
        write_png(out, img.astype(np.float32))


def test_clip_tokenizer_matches_transformers(pipe_dir):
    ref = transformers.CLIPTokenizer(str(pipe_dir / "tokenizer" / "vocab.json"),
                                     str(pipe_dir / "tokenizer" / "merges.txt"))
    ours = load_clip_tokenizer(pipe_dir / "tokenizer")
    for text in ("the red cat", "A  Dog, on the  Cat!", "don't re-do 42 cats", "café"):
        assert ours.encode(text, add_special_tokens=False).ids == ref(text, add_special_tokens=False).input_ids, text


EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "stable_diffusion.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="runs from the monorepo checkout (examples/ is not packaged)")
def test_example_writes_png(pipe_dir, tmp_path):
    import importlib.util
    path = EXAMPLE
    spec = importlib.util.spec_from_file_location("sd_example", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "img.png"
    mod.main(["--model", str(pipe_dir), "--prompt", "the red cat", "--steps", "2", "--height", "128", "--width", "128",
              "--out", str(out)])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (32, 32)
    sd = StableDiffusion.from_pretrained(pipe_dir)
    ids = sd.tokenize("the red cat")
    assert ids[:5] == [sd.bos, sd.tokenizer.token_to_id("the</w>"), sd.tokenizer.token_to_id("red</w>"),
                       sd.tokenizer.token_to_id("cat</w>"), sd.eos] and len(ids) == 16
