"""Stable Diffusion 1.x: the CLIP text encoder, the conditional UNet, the VAE decoder, a DDIM sampler with
classifier-free guidance, and the loader of a local diffusers pipeline folder (model_index.json, text_encoder/,
unet/, vae/, tokenizer/ and optionally scheduler/, weights as safetensors).

    from tinygrad.nn.diffusion import StableDiffusion
    sd = StableDiffusion.from_pretrained("path/to/stable-diffusion-v1-5")
    image = sd.generate("a photo of a cat", steps=20, seed=0)   # (H, W, 3) uint8 numpy array

The modules keep the attribute names of transformers' `CLIPTextModel` and diffusers' `UNet2DConditionModel` and
`AutoencoderKL`, so the checkpoints' state-dict names load as they are.
"""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.dtype import DType, DTypeLike, to_dtype
from tinygrad.nn.layers import Conv2d, Embedding, Linear
from tinygrad.nn.norm import GroupNorm, LayerNorm
from tinygrad.nn.safetensors import safe_load
from tinygrad.nn.state import get_state_dict, load_state_dict

__all__ = ["SCHEDULERS", "AutoencoderKLDecoder", "CLIPTextModel", "DDIMScheduler", "DiffusionConfigError",
           "EulerDiscreteScheduler", "StableDiffusion",
           "UNet2DConditionModel", "load_clip_tokenizer", "load_component_weights", "write_png"]


class DiffusionConfigError(ValueError):
    """A component configuration this module cannot run (a block type, activation or option it does not implement)."""


def _cfg(cfg: Mapping[str, Any], key: str, default: Any = None, where: str = "config.json") -> Any:
    v = cfg.get(key, default)
    if v is None:
        raise DiffusionConfigError(f"{where} has no {key!r}")
    return v


def _per_block(v: int | Sequence[int], n: int, what: str) -> list[int]:
    vals = [int(v)] * n if isinstance(v, int) else [int(x) for x in v]
    if len(vals) != n:
        raise DiffusionConfigError(f"{what} has {len(vals)} entries for {n} blocks")
    return vals


# ---- shared blocks --------------------------------------------------------------------------------------------------

def _heads(x: Tensor, n: int) -> Tensor:
    b, t, c = x.shape
    return x.reshape(b, t, n, c // n).transpose(1, 2)


def _merge_heads(x: Tensor) -> Tensor:
    b, n, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, n * d)


class _Seq:
    """A plain namespace of sub-layers, so that state-dict names follow the checkpoints' nesting
    (`text_model.encoder...`, `ff.net.0.proj`)."""

    def __getattr__(self, name: str) -> Any:  # only reached for names never set: tells mypy that any name may be set
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


class _Attention:
    """diffusers' `Attention`: to_q/to_k/to_v, to_out.0; keys and values from `context` when given."""

    def __init__(self, dim: int, heads: int, context_dim: int | None = None, qkv_bias: bool = False):
        kv = context_dim or dim
        self.heads = heads
        self.to_q = Linear(dim, dim, qkv_bias)
        self.to_k, self.to_v = Linear(kv, dim, qkv_bias), Linear(kv, dim, qkv_bias)
        self.to_out = [Linear(dim, dim)]

    def __call__(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        ctx = x if context is None else context
        q = _heads(self.to_q(x), self.heads)
        k, v = _heads(self.to_k(ctx), self.heads), _heads(self.to_v(ctx), self.heads)
        return self.to_out[0](_merge_heads(q.scaled_dot_product_attention(k, v)))


class _ResnetBlock:
    """diffusers' `ResnetBlock2D` (time-embedding projection added after conv1 when `temb_channels`)."""

    def __init__(self, cin: int, cout: int, groups: int, eps: float, temb_channels: int | None):
        self.norm1, self.conv1 = GroupNorm(groups, cin, eps), Conv2d(cin, cout, 3, padding=1)
        self.time_emb_proj = Linear(temb_channels, cout) if temb_channels else None
        self.norm2, self.conv2 = GroupNorm(groups, cout, eps), Conv2d(cout, cout, 3, padding=1)
        self.conv_shortcut = Conv2d(cin, cout, 1) if cin != cout else None

    def __call__(self, x: Tensor, temb: Tensor | None = None) -> Tensor:
        h = self.conv1(self.norm1(x).silu())
        if self.time_emb_proj is not None and temb is not None:
            h = h + self.time_emb_proj(temb.silu()).reshape(h.shape[0], -1, 1, 1)
        h = self.conv2(self.norm2(h).silu())
        return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


class _Downsample:
    def __init__(self, c: int):
        self.conv = Conv2d(c, c, 3, stride=2, padding=1)

    def __call__(self, x: Tensor) -> Tensor:
        return self.conv(x)


class _Upsample:
    def __init__(self, c: int):
        self.conv = Conv2d(c, c, 3, padding=1)

    def __call__(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape  # nearest-neighbour 2x: each pixel repeated into a 2x2 square
        return self.conv(x.reshape(b, c, h, 1, w, 1).expand(b, c, h, 2, w, 2).reshape(b, c, 2 * h, 2 * w))


class _FeedForward:
    """GEGLU feed-forward: net.0.proj gives value and gate, net.2 projects back (net.1 is dropout)."""

    def __init__(self, dim: int, mult: int = 4):
        self.net: list[Any] = [_Seq(), None, Linear(dim * mult, dim)]
        self.net[0].proj = Linear(dim, dim * mult * 2)

    def __call__(self, x: Tensor) -> Tensor:
        h, gate = self.net[0].proj(x).chunk(2, dim=-1)
        return self.net[2](h * gate.gelu(approximate="none"))


class _TransformerBlock:
    def __init__(self, dim: int, heads: int, context_dim: int):
        self.norm1, self.attn1 = LayerNorm(dim), _Attention(dim, heads)
        self.norm2, self.attn2 = LayerNorm(dim), _Attention(dim, heads, context_dim)
        self.norm3, self.ff = LayerNorm(dim), _FeedForward(dim)

    def __call__(self, x: Tensor, context: Tensor) -> Tensor:
        x = x + self.attn1(self.norm1(x))
        x = x + self.attn2(self.norm2(x), context)
        return x + self.ff(self.norm3(x))


class _Transformer2D:
    """diffusers' `Transformer2DModel` over a feature map: group norm, proj_in, transformer blocks, proj_out, plus
    the input. proj_in/proj_out are 1x1 convolutions (SD 1.x) or Linear layers (`use_linear_projection`)."""

    def __init__(self, c: int, heads: int, context_dim: int, groups: int, layers: int, linear_proj: bool):
        self.norm = GroupNorm(groups, c, 1e-6)
        self.linear_proj = linear_proj
        self.proj_in: Any = Linear(c, c) if linear_proj else Conv2d(c, c, 1)
        self.transformer_blocks = [_TransformerBlock(c, heads, context_dim) for _ in range(layers)]
        self.proj_out: Any = Linear(c, c) if linear_proj else Conv2d(c, c, 1)

    def __call__(self, x: Tensor, context: Tensor) -> Tensor:
        b, c, h, w = x.shape
        t = self.norm(x)
        if not self.linear_proj:
            t = self.proj_in(t)
        t = t.reshape(b, c, h * w).transpose(1, 2)
        if self.linear_proj:
            t = self.proj_in(t)
        for blk in self.transformer_blocks:
            t = blk(t, context)
        if self.linear_proj:
            t = self.proj_out(t)
        t = t.transpose(1, 2).reshape(b, c, h, w)
        if not self.linear_proj:
            t = self.proj_out(t)
        return t + x


# ---- CLIP text encoder ----------------------------------------------------------------------------------------------

class _CLIPLayer:
    def __init__(self, dim: int, heads: int, ffn: int, eps: float, act: Callable[[Tensor], Tensor]):
        self.heads, self.act = heads, act
        self.self_attn = _Seq()
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(self.self_attn, n, Linear(dim, dim))
        self.layer_norm1, self.layer_norm2 = LayerNorm(dim, eps), LayerNorm(dim, eps)
        self.mlp = _Seq()
        self.mlp.fc1, self.mlp.fc2 = Linear(dim, ffn), Linear(ffn, dim)

    def __call__(self, x: Tensor) -> Tensor:
        a, h = self.self_attn, self.layer_norm1(x)
        q, k, v = (_heads(p(h), self.heads) for p in (a.q_proj, a.k_proj, a.v_proj))
        x = x + a.out_proj(_merge_heads(q.scaled_dot_product_attention(k, v, is_causal=True)))
        return x + self.mlp.fc2(self.act(self.mlp.fc1(self.layer_norm2(x))))


_CLIP_ACTS: dict[str, Callable[[Tensor], Tensor]] = {
    "quick_gelu": lambda x: x.quick_gelu(), "gelu": lambda x: x.gelu(approximate="none"),
    "gelu_new": lambda x: x.gelu(), "gelu_pytorch_tanh": lambda x: x.gelu()}


class CLIPTextModel:
    """transformers' `CLIPTextModel`: token + learned position embeddings, pre-norm layers with causal attention,
    final layer norm. Calling it gives the last hidden state (what SD 1.x conditions on)."""

    _optional_prefixes = ("text_model.",)

    def __init__(self, cfg: Mapping[str, Any]):
        dim, layers = int(_cfg(cfg, "hidden_size")), int(_cfg(cfg, "num_hidden_layers"))
        heads, ffn = int(_cfg(cfg, "num_attention_heads")), int(_cfg(cfg, "intermediate_size"))
        eps, act = float(cfg.get("layer_norm_eps", 1e-5)), str(cfg.get("hidden_act", "quick_gelu"))
        if act not in _CLIP_ACTS:
            raise DiffusionConfigError(f"text_encoder hidden_act {act!r} is not implemented; known: "
                                       f"{sorted(_CLIP_ACTS)}")
        self.max_positions = int(_cfg(cfg, "max_position_embeddings"))
        self.text_model = _Seq()
        self.text_model.embeddings = _Seq()
        self.text_model.embeddings.token_embedding = Embedding(int(_cfg(cfg, "vocab_size")), dim)
        self.text_model.embeddings.position_embedding = Embedding(self.max_positions, dim)
        self.text_model.encoder = _Seq()
        self.text_model.encoder.layers = [_CLIPLayer(dim, heads, ffn, eps, _CLIP_ACTS[act]) for _ in range(layers)]
        self.text_model.final_layer_norm = LayerNorm(dim, eps)

    def __call__(self, input_ids: Tensor) -> Tensor:
        if input_ids.ndim != 2 or input_ids.shape[1] > self.max_positions:
            raise ValueError(f"input_ids must be (batch, length <= {self.max_positions}), got {input_ids.shape}")
        tm, n = self.text_model, input_ids.shape[1]
        x = tm.embeddings.token_embedding(input_ids) + tm.embeddings.position_embedding(Tensor.arange(n).reshape(1, n))
        for layer in tm.encoder.layers:
            x = layer(x)
        return tm.final_layer_norm(x)


# ---- UNet ------------------------------------------------------------------------------------------------------------

def timestep_embedding(t: Tensor, dim: int, flip_sin_to_cos: bool = True, shift: float = 0.0) -> Tensor:
    """diffusers' sinusoidal timestep embedding of a (batch,) tensor of timesteps."""
    half = dim // 2
    freqs = Tensor(np.exp(-math.log(10000) * np.arange(half, dtype=np.float64) / (half - shift)).astype(np.float32))
    args = t.float().reshape(-1, 1) * freqs.reshape(1, half)
    sin, cos = args.sin(), args.cos()
    emb = cos.cat(sin, dim=-1) if flip_sin_to_cos else sin.cat(cos, dim=-1)
    return emb.pad(((0, 0), (0, 1))) if dim % 2 else emb


class _UNetBlock:
    """A down or up block: resnets, optional attentions after each, optional down/upsampler."""

    def __init__(self) -> None:
        self.resnets: list[_ResnetBlock] = []
        self.attentions: list[_Transformer2D] | None = None
        self.downsamplers: list[_Downsample] | None = None
        self.upsamplers: list[_Upsample] | None = None


class UNet2DConditionModel:
    """diffusers' `UNet2DConditionModel` as SD 1.x configures it (CrossAttnDownBlock2D / DownBlock2D,
    UNetMidBlock2DCrossAttn, UpBlock2D / CrossAttnUpBlock2D). `__call__(latents, timesteps, context)` gives the
    predicted noise."""

    _DOWN = ("CrossAttnDownBlock2D", "DownBlock2D")
    _UP = ("CrossAttnUpBlock2D", "UpBlock2D")

    def __init__(self, cfg: Mapping[str, Any]):
        chans = [int(c) for c in _cfg(cfg, "block_out_channels")]
        n = len(chans)
        down_types, up_types = list(_cfg(cfg, "down_block_types")), list(_cfg(cfg, "up_block_types"))
        for t in down_types + up_types:
            if t not in self._DOWN + self._UP:
                raise DiffusionConfigError(f"unet block type {t!r} is not implemented (SD 1.x uses "
                                           f"{self._DOWN + self._UP})")
        for key, ok in (("time_embedding_type", "positional"), ("mid_block_type", "UNetMidBlock2DCrossAttn"),
                        ("resnet_time_scale_shift", "default"), ("class_embed_type", None),
                        ("addition_embed_type", None), ("encoder_hid_dim", None), ("num_class_embeds", None),
                        ("time_cond_proj_dim", None), ("only_cross_attention", False), ("dual_cross_attention", False),
                        ("center_input_sample", False), ("conv_in_kernel", 3), ("conv_out_kernel", 3),
                        ("act_fn", "silu"), ("attention_type", "default"), ("cross_attention_norm", None)):
            if cfg.get(key, ok) != ok:
                raise DiffusionConfigError(f"unet {key}={cfg[key]!r} is not implemented (SD 1.x has {ok!r})")
        if not len(down_types) == len(up_types) == n:
            raise DiffusionConfigError(f"unet has {n} block_out_channels but {len(down_types)} down and "
                                       f"{len(up_types)} up block types; they must match")
        layers = int(cfg.get("layers_per_block", 2))
        groups, eps = int(cfg.get("norm_num_groups", 32)), float(cfg.get("norm_eps", 1e-5))
        ctx = int(_cfg(cfg, "cross_attention_dim"))
        heads = _per_block(cfg.get("num_attention_heads") or _cfg(cfg, "attention_head_dim"), n, "attention heads")
        tlayers = _per_block(cfg.get("transformer_layers_per_block", 1), n, "transformer_layers_per_block")
        linear = bool(cfg.get("use_linear_projection", False))
        self.flip, self.shift = bool(cfg.get("flip_sin_to_cos", True)), float(cfg.get("freq_shift", 0))
        temb = chans[0] * 4
        self.conv_in = Conv2d(int(cfg.get("in_channels", 4)), chans[0], 3, padding=1)
        self.time_embedding = _Seq()
        self.time_embedding.linear_1, self.time_embedding.linear_2 = Linear(chans[0], temb), Linear(temb, temb)
        self.down_blocks: list[_UNetBlock] = []
        cin = chans[0]
        for i, (t, c) in enumerate(zip(down_types, chans, strict=True)):
            blk = _UNetBlock()
            blk.resnets = [_ResnetBlock(cin if j == 0 else c, c, groups, eps, temb) for j in range(layers)]
            if t == "CrossAttnDownBlock2D":
                blk.attentions = [_Transformer2D(c, heads[i], ctx, groups, tlayers[i], linear) for _ in range(layers)]
            if i < n - 1:
                blk.downsamplers = [_Downsample(c)]
            self.down_blocks.append(blk)
            cin = c
        self.mid_block = _UNetBlock()
        self.mid_block.resnets = [_ResnetBlock(chans[-1], chans[-1], groups, eps, temb) for _ in range(2)]
        self.mid_block.attentions = [_Transformer2D(chans[-1], heads[-1], ctx, groups, tlayers[-1], linear)]
        self.up_blocks: list[_UNetBlock] = []
        rc, rh, rt = chans[::-1], heads[::-1], tlayers[::-1]
        prev = rc[0]
        for i, (t, c) in enumerate(zip(up_types, rc, strict=True)):
            skip_in = rc[min(i + 1, n - 1)]
            blk = _UNetBlock()
            blk.resnets = [_ResnetBlock((prev if j == 0 else c) + (skip_in if j == layers else c), c, groups, eps, temb)
                           for j in range(layers + 1)]
            if t == "CrossAttnUpBlock2D":
                blk.attentions = [_Transformer2D(c, rh[i], ctx, groups, rt[i], linear) for _ in range(layers + 1)]
            if i < n - 1:
                blk.upsamplers = [_Upsample(c)]
            self.up_blocks.append(blk)
            prev = c
        self.conv_norm_out = GroupNorm(groups, chans[0], eps)
        self.conv_out = Conv2d(chans[0], int(cfg.get("out_channels", 4)), 3, padding=1)
        self.channels0 = chans[0]

    def __call__(self, x: Tensor, timesteps: Tensor, context: Tensor) -> Tensor:
        t = timestep_embedding(timesteps, self.channels0, self.flip, self.shift).cast(x.dtype)
        if t.shape[0] != x.shape[0]:
            t = t.expand(x.shape[0], t.shape[1])
        temb = self.time_embedding.linear_2(self.time_embedding.linear_1(t).silu())
        h = self.conv_in(x)
        skips = [h]
        for blk in self.down_blocks:
            for j, res in enumerate(blk.resnets):
                h = res(h, temb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h, context)
                skips.append(h)
            if blk.downsamplers is not None:
                h = blk.downsamplers[0](h)
                skips.append(h)
        assert self.mid_block.attentions is not None
        h = self.mid_block.resnets[0](h, temb)
        h = self.mid_block.attentions[0](h, context)
        h = self.mid_block.resnets[1](h, temb)
        for blk in self.up_blocks:
            for j, res in enumerate(blk.resnets):
                h = res(h.cat(skips.pop(), dim=1), temb)
                if blk.attentions is not None:
                    h = blk.attentions[j](h, context)
            if blk.upsamplers is not None:
                h = blk.upsamplers[0](h)
        return self.conv_out(self.conv_norm_out(h).silu())


# ---- VAE decoder ----------------------------------------------------------------------------------------------------

class _VAEAttention:
    """The VAE mid-block attention: one group-normed self-attention over the pixels (to_q/k/v with bias), plus input."""

    def __init__(self, c: int, groups: int, heads: int):
        self.group_norm = GroupNorm(groups, c, 1e-6)
        self.to_q, self.to_k, self.to_v = Linear(c, c), Linear(c, c), Linear(c, c)
        self.to_out = [Linear(c, c)]
        self.heads = heads

    def __call__(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        t = self.group_norm(x).reshape(b, c, h * w).transpose(1, 2)
        q, k, v = (_heads(p(t), self.heads) for p in (self.to_q, self.to_k, self.to_v))
        o = self.to_out[0](_merge_heads(q.scaled_dot_product_attention(k, v)))
        return o.transpose(1, 2).reshape(b, c, h, w) + x


class AutoencoderKLDecoder:
    """diffusers' `AutoencoderKL` decoding half: post_quant_conv and decoder (conv_in, mid block, up blocks,
    conv_norm_out, conv_out). `decode(latents)` undoes the scaling factor and gives images in [-1, 1]. The
    encoder's weights, when present in the checkpoint, are not loaded (text-to-image never encodes)."""

    def __init__(self, cfg: Mapping[str, Any]):
        chans = [int(c) for c in _cfg(cfg, "block_out_channels")]
        for t in cfg.get("up_block_types", ["UpDecoderBlock2D"] * len(chans)):
            if t != "UpDecoderBlock2D":
                raise DiffusionConfigError(f"vae up block type {t!r} is not implemented (AutoencoderKL uses "
                                           f"UpDecoderBlock2D)")
        latent, groups = int(cfg.get("latent_channels", 4)), int(cfg.get("norm_num_groups", 32))
        layers = int(cfg.get("layers_per_block", 2))
        self.scaling_factor = float(cfg.get("scaling_factor", 0.18215))
        eps = 1e-6
        if cfg.get("use_post_quant_conv", True):
            self.post_quant_conv: Conv2d | None = Conv2d(latent, latent, 1)
        else:
            self.post_quant_conv = None
        d = self.decoder = _Seq()
        d.conv_in = Conv2d(latent, chans[-1], 3, padding=1)
        d.mid_block = _Seq()
        d.mid_block.resnets = [_ResnetBlock(chans[-1], chans[-1], groups, eps, None) for _ in range(2)]
        d.mid_block.attentions = [_VAEAttention(chans[-1], groups, 1)] if cfg.get("mid_block_add_attention", True) \
            else None
        d.up_blocks = []
        rc, prev = chans[::-1], chans[-1]
        for i, c in enumerate(rc):
            blk = _UNetBlock()
            blk.resnets = [_ResnetBlock(prev if j == 0 else c, c, groups, eps, None) for j in range(layers + 1)]
            if i < len(rc) - 1:
                blk.upsamplers = [_Upsample(c)]
            d.up_blocks.append(blk)
            prev = c
        d.conv_norm_out = GroupNorm(groups, chans[0], eps)
        d.conv_out = Conv2d(chans[0], int(cfg.get("out_channels", 3)), 3, padding=1)

    def __call__(self, z: Tensor) -> Tensor:
        """The decoder on latents already divided by the scaling factor."""
        d = self.decoder
        h = z if self.post_quant_conv is None else self.post_quant_conv(z)
        h = d.mid_block.resnets[0](d.conv_in(h))
        if d.mid_block.attentions is not None:
            h = d.mid_block.attentions[0](h)
        h = d.mid_block.resnets[1](h)
        for blk in d.up_blocks:
            for res in blk.resnets:
                h = res(h)
            if blk.upsamplers is not None:
                h = blk.upsamplers[0](h)
        return d.conv_out(d.conv_norm_out(h).silu())

    def decode(self, latents: Tensor) -> Tensor:
        return self(latents / self.scaling_factor)


# ---- scheduler ------------------------------------------------------------------------------------------------------

@dataclass
class DDIMScheduler:
    """Deterministic DDIM (eta = 0) with diffusers' DDIMScheduler conventions (SD 1.x defaults: scaled_linear betas
    0.00085..0.012 over 1000 steps, 'leading' spacing with steps_offset 1, epsilon prediction)."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: str = "scaled_linear"
    set_alpha_to_one: bool = False
    steps_offset: int = 1
    timestep_spacing: str = "leading"
    prediction_type: str = "epsilon"
    clip_sample: bool = False

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> DDIMScheduler:
        known = {k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg}
        s = cls(**known)
        if s.beta_schedule not in ("scaled_linear", "linear"):
            raise DiffusionConfigError(f"scheduler beta_schedule {s.beta_schedule!r} is not implemented "
                                       f"(scaled_linear or linear)")
        if s.timestep_spacing not in ("leading", "trailing", "linspace"):
            raise DiffusionConfigError(f"scheduler timestep_spacing {s.timestep_spacing!r} is not implemented")
        if s.prediction_type not in ("epsilon", "v_prediction"):
            raise DiffusionConfigError(f"scheduler prediction_type {s.prediction_type!r} is not implemented")
        if s.clip_sample:
            raise DiffusionConfigError("scheduler clip_sample=True is not implemented (SD 1.x has False)")
        return s

    @property
    def alphas_cumprod(self) -> np.ndarray:
        n = self.num_train_timesteps
        if self.beta_schedule == "scaled_linear":
            betas = np.linspace(self.beta_start ** 0.5, self.beta_end ** 0.5, n, dtype=np.float32) ** 2
        else:
            betas = np.linspace(self.beta_start, self.beta_end, n, dtype=np.float32)
        return np.cumprod(1.0 - betas, axis=0)

    def timesteps(self, steps: int) -> list[int]:
        n = self.num_train_timesteps
        if not 1 <= steps <= n:
            raise ValueError(f"steps must be in [1, {n}], got {steps}")
        ts: np.ndarray
        if self.timestep_spacing == "leading":
            ts = (np.arange(steps) * (n // steps)).round()[::-1] + self.steps_offset
        elif self.timestep_spacing == "trailing":
            ts = np.round(np.arange(n, 0, -n / steps)) - 1
        else:
            ts = np.linspace(0, n - 1, steps).round()[::-1]
        return [int(t) for t in ts]

    def coefficients(self, t: int, steps: int) -> tuple[float, float]:
        """(alpha_prod_t, alpha_prod_prev) of a DDIM step from timestep t."""
        ac = self.alphas_cumprod
        prev = t - self.num_train_timesteps // steps
        final = 1.0 if self.set_alpha_to_one else float(ac[0])
        return float(ac[t]), float(ac[prev]) if prev >= 0 else final

    def init_noise_sigma(self, steps: int) -> float:
        return 1.0

    def scale_input(self, sample: Tensor, i: int, steps: int) -> Tensor:
        return sample

    def step_at(self, model_output: Tensor, i: int, sample: Tensor, steps: int) -> Tensor:
        """The step from the i-th of `timesteps(steps)`."""
        return self.step(model_output, self.timesteps(steps)[i], sample, steps)

    def step(self, model_output: Tensor, t: int, sample: Tensor, steps: int) -> Tensor:
        a_t, a_prev = self.coefficients(t, steps)
        if self.prediction_type == "epsilon":
            x0 = (sample - math.sqrt(1 - a_t) * model_output) / math.sqrt(a_t)
            eps = model_output
        else:
            x0 = math.sqrt(a_t) * sample - math.sqrt(1 - a_t) * model_output
            eps = math.sqrt(a_t) * model_output + math.sqrt(1 - a_t) * sample
        return math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps


@dataclass
class EulerDiscreteScheduler(DDIMScheduler):
    """Euler on the sigma = sqrt((1 - alpha_bar) / alpha_bar) schedule, as diffusers' EulerDiscreteScheduler with
    its defaults (no churn, linear sigma interpolation, final sigma 0). The same config keys as DDIM."""

    def _plan(self, steps: int) -> tuple[list[float], np.ndarray]:
        n = self.num_train_timesteps
        if not 1 <= steps <= n:
            raise ValueError(f"steps must be in [1, {n}], got {steps}")
        ts: np.ndarray
        if self.timestep_spacing == "linspace":
            ts = np.linspace(0, n - 1, steps, dtype=np.float32)[::-1]
        elif self.timestep_spacing == "leading":
            ts = (np.arange(steps) * (n // steps)).round()[::-1].astype(np.float32) + self.steps_offset
        else:
            ts = (np.arange(n, 0, -n / steps).round() - 1).astype(np.float32)
        ac = self.alphas_cumprod
        sig = np.interp(ts, np.arange(len(ac)), np.sqrt((1 - ac) / ac))
        return [float(t) for t in ts], np.concatenate([sig, [0.0]]).astype(np.float32)

    def timesteps(self, steps: int) -> list[float]:  # type: ignore[override]
        return self._plan(steps)[0]

    def init_noise_sigma(self, steps: int) -> float:
        top = float(self._plan(steps)[1].max())
        return top if self.timestep_spacing in ("linspace", "trailing") else math.sqrt(top * top + 1)

    def scale_input(self, sample: Tensor, i: int, steps: int) -> Tensor:
        return sample / math.sqrt(float(self._plan(steps)[1][i]) ** 2 + 1)

    def step_at(self, model_output: Tensor, i: int, sample: Tensor, steps: int) -> Tensor:
        sig = self._plan(steps)[1]
        sigma, nxt = float(sig[i]), float(sig[i + 1])
        if self.prediction_type == "epsilon":
            derivative = model_output
        else:  # v-prediction: x0 = -sigma/sqrt(sigma^2+1) * v + x/(sigma^2+1), and d = (x - x0) / sigma
            x0 = model_output * (-sigma / math.sqrt(sigma * sigma + 1)) + sample / (sigma * sigma + 1)
            derivative = (sample - x0) / sigma
        return sample + derivative * (nxt - sigma)


SCHEDULERS: dict[str, type[DDIMScheduler]] = {"ddim": DDIMScheduler, "euler": EulerDiscreteScheduler}


# ---- loading ---------------------------------------------------------------------------------------------------------

def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass a diffusers pipeline folder (model_index.json, "
                                f"text_encoder/, unet/, vae/, tokenizer/)")
    try:
        out = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DiffusionConfigError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(out, dict):
        raise DiffusionConfigError(f"{path} must hold a JSON object")
    return out


def load_component_weights(model: Any, directory: str | pathlib.Path, dtype: DTypeLike | None = None) -> None:
    """Load every *.safetensors file of `directory` (one file or shards; an '.fp16' variant only when it is the only
    one) into `model` by state-dict name. Entries the model has no place for (e.g. the VAE encoder, CLIP's
    position_ids) are ignored; a tensor the model needs but the files lack is an error."""
    d = pathlib.Path(directory)
    files = sorted(p for p in d.glob("*.safetensors") if ".fp16." not in p.name) or sorted(d.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weights in {d}; save the component with safe_serialization=True")
    targets = get_state_dict(model)
    # transformers 5 saves CLIPTextModel without its `text_model.` prefix, older versions and the published SD
    # checkpoints with it: accept both spellings
    prefixes = getattr(model, "_optional_prefixes", ())
    names = {k: k for k in targets} | {k.removeprefix(p): k for k in targets for p in prefixes if k.startswith(p)}
    sd: dict[str, Tensor] = {}
    for f in files:
        sd.update({names[k]: v for k, v in safe_load(f).items() if k in names})
    missing = [k for k in targets if k not in sd]
    if missing:
        raise KeyError(f"{d}: the weights lack {len(missing)} tensors the model needs, e.g. {missing[:5]}; is this "
                       f"the right component folder (and an SD 1.x layout)?")
    load_state_dict(model, sd, strict=True, consume=True)
    if dtype is not None and to_dtype(dtype) != dtypes.float32:
        _cast_params(model, to_dtype(dtype), set())


def _cast_params(obj: Any, dtype: DType, seen: set[int]) -> None:
    """Replace every float tensor attribute under `obj` (through attributes and lists) by its cast to `dtype`."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    items: list[tuple[Any, Any]] = list(enumerate(obj)) if isinstance(obj, list) else \
        list(vars(obj).items()) if hasattr(obj, "__dict__") else []
    for k, v in items:
        if isinstance(v, Tensor):
            if v.dtype.is_float and v.dtype != dtype:
                new = v.cast(dtype).contiguous().realize()
                if isinstance(obj, list):
                    obj[k] = new
                else:
                    setattr(obj, k, new)
        elif isinstance(v, list) or type(v).__module__.startswith("tinygrad.nn"):  # layers, not functions
            _cast_params(v, dtype, seen)


def load_clip_tokenizer(directory: str | pathlib.Path) -> Any:
    """CLIP's BPE tokenizer from tokenizer/vocab.json + merges.txt, built with the `tokenizers` package as
    transformers' CLIP converter does (NFC, whitespace collapsed, lower case; words split by CLIP's pattern; byte-level
    symbols; '</w>' marks word ends)."""
    d = pathlib.Path(directory)
    vocab, merges = d / "vocab.json", d / "merges.txt"
    if not vocab.is_file() or not merges.is_file():
        raise FileNotFoundError(f"{d} needs vocab.json and merges.txt (CLIP's BPE files)")
    try:
        from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    except ImportError as e:
        raise ImportError("the CLIP tokenizer needs the `tokenizers` package: pip install tokenizers") from e
    tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges), unk_token="<|endoftext|>", end_of_word_suffix="</w>",
                                         continuing_subword_prefix="", fuse_unk=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"), behavior="removed",
                             invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _dtype(d: DTypeLike | None) -> DType:
    out = to_dtype(d) if d is not None else dtypes.float32
    if not out.is_float:
        raise ValueError(f"the model dtype must be a float type, got {out}")
    return out


class StableDiffusion:
    """The SD 1.x text-to-image pipeline of a local diffusers folder."""

    def __init__(self, text_encoder: CLIPTextModel, unet: UNet2DConditionModel, vae: AutoencoderKLDecoder,
                 scheduler: DDIMScheduler, tokenizer: Any = None, dtype: DTypeLike | None = None,
                 bos: int = 49406, eos: int = 49407, pad: int = 49407):
        self.text_encoder, self.unet, self.vae, self.scheduler, self.tokenizer = text_encoder, unet, vae, scheduler, \
            tokenizer
        self.dtype, self.bos, self.eos, self.pad = _dtype(dtype), bos, eos, pad
        self.latent_channels = unet.conv_in.weight.shape[1]
        self._jit_key: tuple[Any, ...] | None = None
        self._jit: TinyJit | None = None

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path, dtype: DTypeLike | None = None,
                        scheduler: str = "ddim") -> StableDiffusion:
        """`scheduler`: 'ddim' or 'euler', configured from the folder's scheduler/scheduler_config.json (the keys they
        share: betas, spacing, offset, prediction type) or SD 1.x's defaults without one."""
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler {scheduler!r} is not implemented; choose one of {sorted(SCHEDULERS)}")
        root = pathlib.Path(path)
        _read_json(root / "model_index.json")
        te = CLIPTextModel(_read_json(root / "text_encoder" / "config.json"))
        unet = UNet2DConditionModel(_read_json(root / "unet" / "config.json"))
        vae = AutoencoderKLDecoder(_read_json(root / "vae" / "config.json"))
        # the text encoder stays float32: its few tokens cost little and half precision loses accuracy in CLIP's
        # large activations
        load_component_weights(te, root / "text_encoder")
        load_component_weights(unet, root / "unet", dtype)
        load_component_weights(vae, root / "vae", dtype)
        sched_cfg = root / "scheduler" / "scheduler_config.json"
        kind = SCHEDULERS[scheduler]
        sched = kind.from_config(_read_json(sched_cfg)) if sched_cfg.is_file() else kind()
        tok, ids = None, {}
        if (root / "tokenizer" / "vocab.json").is_file():
            tok = load_clip_tokenizer(root / "tokenizer")
            ids = {k: tok.token_to_id(k) for k in ("<|startoftext|>", "<|endoftext|>")}
        pad_tok = "<|endoftext|>"
        tcfg = root / "tokenizer" / "tokenizer_config.json"
        if tok is not None and tcfg.is_file():
            p = _read_json(tcfg).get("pad_token")
            pad_tok = p.get("content", pad_tok) if isinstance(p, dict) else (p or pad_tok)
        return cls(te, unet, vae, sched, tok, dtype, bos=ids.get("<|startoftext|>") or 49406,
                   eos=ids.get("<|endoftext|>") or 49407,
                   pad=(tok.token_to_id(pad_tok) if tok is not None else None) or 49407)

    def tokenize(self, prompt: str) -> list[int]:
        """BOS, the prompt's tokens (cut to fit), EOS, then padding to the encoder's length."""
        if self.tokenizer is None:
            raise ValueError("this pipeline has no tokenizer/ folder (vocab.json, merges.txt): pass token ids")
        n = self.text_encoder.max_positions
        body = self.tokenizer.encode(prompt, add_special_tokens=False).ids[:n - 2]
        ids = [self.bos, *body, self.eos]
        return ids + [self.pad] * (n - len(ids))

    def encode_ids(self, ids: Sequence[Sequence[int]]) -> Tensor:
        return self.text_encoder(Tensor(np.asarray(ids, dtype=np.int32))).cast(self.dtype)

    def _unet_guided(self, x: Tensor, t: Tensor, context: Tensor, guidance: Tensor) -> Tensor:
        """Classifier-free guidance: one UNet call on [unconditional, conditional] halves."""
        b = x.shape[0]
        eps = self.unet(x.cat(x, dim=0), t, context)
        uncond, cond = eps[:b], eps[b:]
        return (uncond + guidance * (cond - uncond)).realize()

    def sample(self, context: Tensor, latents: Tensor, steps: int, guidance: float = 7.5,
               callback: Callable[[int, float, Tensor], None] | None = None) -> Tensor:
        """The scheduler's sampling (DDIM or Euler) from `latents` (unit-variance noise) with `context` =
        [unconditional; conditional] encoder states (or only the conditional ones when guidance is 1). The UNet step
        is a TinyJit, reused across calls of one shape."""
        guided = guidance != 1.0
        if context.shape[0] != (2 if guided else 1) * latents.shape[0]:
            raise ValueError(f"context has batch {context.shape[0]} for latents of batch {latents.shape[0]}: with "
                             f"guidance != 1 it must stack the unconditional and the conditional states (2x the "
                             f"latents' batch), with guidance 1 only the conditional ones")
        key = (tuple(latents.shape), tuple(context.shape), guided, latents.dtype)
        if self._jit is None or self._jit_key != key:
            fn = self._unet_guided if guided else (lambda x, t, c, g: self.unet(x, t, c).realize())
            self._jit, self._jit_key = TinyJit(fn), key
        g = Tensor([guidance], dtype=latents.dtype)
        sched = self.scheduler
        x = (latents.float() * sched.init_noise_sigma(steps)).realize()
        for i, t in enumerate(sched.timesteps(steps)):
            x_in = sched.scale_input(x, i, steps).cast(self.dtype).realize()
            eps = self._jit(x_in, Tensor([t], dtype=dtypes.float32), context.realize(), g.realize())
            # the scheduler's arithmetic in float32, as diffusers' schedulers do
            x = sched.step_at(eps.float(), i, x, steps).realize()
            if callback is not None:
                callback(i, t, x)
        return x.cast(self.dtype)

    def generate(self, prompt: str, steps: int = 20, seed: int = 0, guidance: float = 7.5, height: int = 512,
                 width: int = 512, negative_prompt: str = "") -> np.ndarray:
        """The (height, width, 3) uint8 image for `prompt`."""
        if height % 8 or width % 8:
            raise ValueError(f"height and width must be multiples of 8 (the VAE's scale), got {height}x{width}")
        ids = [self.tokenize(prompt)] if guidance == 1.0 else [self.tokenize(negative_prompt), self.tokenize(prompt)]
        context = self.encode_ids(ids)
        rng = np.random.default_rng(seed)
        noise = rng.standard_normal((1, self.latent_channels, height // 8, width // 8)).astype(np.float32)
        latents = self.sample(context, Tensor(noise), steps, guidance)
        return to_uint8(self.vae.decode(latents.cast(self.dtype)))


def to_uint8(images: Tensor) -> np.ndarray:
    """Images in [-1, 1] of shape (1, 3, H, W) as an (H, W, 3) uint8 array."""
    x = ((images.float()[0] / 2 + 0.5).clip(0, 1) * 255).round().cast(dtypes.uint8).permute(1, 2, 0)
    return x.numpy()


def write_png(path: str | pathlib.Path, image: np.ndarray) -> None:
    """Write an (H, W, 3) uint8 array as an 8-bit RGB PNG, with the stdlib's zlib; a temp file renamed over `path`."""
    import os
    import struct
    import tempfile
    import zlib
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"write_png takes an (H, W, 3) uint8 array, got {image.dtype} {image.shape}")
    h, w, _ = image.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + image[y].tobytes() for y in range(h))  # filter type 0 on every row
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b"")
    target = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(png)
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
