"""Whisper speech recognition: the log-mel front end, the encoder-decoder and greedy decoding, loaded from a Hugging
Face checkpoint in the layout of `WhisperForConditionalGeneration` (openai/whisper-* on the Hub: config.json,
model.safetensors, and generation_config.json / tokenizer.json when present).

    from tinygrad.nn.whisper import Whisper, load_wav
    model = Whisper.from_pretrained("path/to/whisper-tiny")
    ids = model.transcribe(load_wav("speech.wav"))[0]

How it runs. `log_mel` pads or trims the audio to the model's window (30 s for the published models) and computes
Whisper's features with Tensor ops: the frames are views of the signal, a matmul with a windowed DFT matrix gives
their spectra, and a second one the mel bands. `encode` turns them into the encoder states; `transcribe` then writes
each decoder layer's cross-attention keys and values for those states once (they are the same for every token),
runs the prompt through the decoder in one call, and produces every further token with a `TinyJit` step whose
position is a bound `Variable`, reading and writing the self-attention KV cache in place.
"""

from __future__ import annotations

import json
import math
import pathlib
import wave
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from tinygrad import Tensor, TinyJit, Variable, dtypes
from tinygrad.dtype import DType, DTypeLike, to_dtype
from tinygrad.nn.norm import LayerNorm
from tinygrad.nn.transformer import (
    ConfigError,
    Embedding,
    KVCache,
    Linear,
    WeightsError,
    _install,
    _need,
    _read_config,
    load_hf_weights,
    load_tokenizer,
)
from tinygrad.uop.ops import UOp

__all__ = ["HOP_LENGTH", "N_FFT", "SAMPLE_RATE", "ConfigError", "LogMelSpectrogram", "WeightsError", "Whisper",
           "WhisperConfig", "WhisperGenerationConfig", "hann_window", "load_tokenizer", "load_wav", "mel_filters",
           "sinusoids"]

SAMPLE_RATE = 16000  # Whisper's features are defined for 16 kHz audio
N_FFT = 400  # 25 ms windows
HOP_LENGTH = 160  # 10 ms between frames

Pos = int | UOp  # a start position: a plain int, or a bound Variable inside the jitted decode step


# ---- audio --------------------------------------------------------------------------------------------------------

def load_wav(path: str | pathlib.Path) -> np.ndarray:
    """The samples of a 16 kHz PCM WAV file as float32 in [-1, 1), channels averaged to mono. 8-, 16-, 24- and
    32-bit integer samples are read (the formats of the stdlib `wave` module); another rate is an error, since this
    module does not resample."""
    try:
        with wave.open(str(path), "rb") as w:
            rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
            raw = w.readframes(w.getnframes())
    except wave.Error as e:
        raise ValueError(f"{path} is not a PCM WAV file that the wave module reads ({e}); convert it, e.g. "
                         f"`ffmpeg -i {path} -ar {SAMPLE_RATE} -ac 1 -c:a pcm_s16le out.wav`") from e
    if rate != SAMPLE_RATE:
        raise ValueError(f"{path} is sampled at {rate} Hz; Whisper needs {SAMPLE_RATE} Hz and resampling is not "
                         f"implemented here: convert it, e.g. `ffmpeg -i {path} -ar {SAMPLE_RATE} -ac 1 out.wav`")
    if width == 1:  # 8-bit WAV is unsigned, centred on 128
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        data = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:  # no numpy dtype: assemble little-endian triples, the top byte carrying the sign
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        ints = b[:, 0].astype(np.int32) | (b[:, 1].astype(np.int32) << 8) | (b[:, 2].astype(np.int8).astype(np.int32)
                                                                              << 16)
        data = ints.astype(np.float32) / float(1 << 23)
    elif width == 4:
        data = (np.frombuffer(raw, "<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    else:
        raise ValueError(f"{path} has {8 * width}-bit samples; 8, 16, 24 or 32-bit PCM is supported")
    return data.reshape(-1, channels).mean(axis=1, dtype=np.float32)


def hann_window(n: int) -> np.ndarray:
    """The periodic Hann window of length n (float32), the one of torch.stft and Whisper: 0.5 - 0.5 cos(2 pi k / n)."""
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (3 mels per 200 Hz) below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, np.float64)
    linear = hz * 3.0 / 200.0
    log_step = math.log(6.4) / 27.0
    return np.where(hz >= 1000.0, 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / log_step, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    log_step = math.log(6.4) / 27.0
    return np.where(mel >= 15.0, 1000.0 * np.exp(log_step * (mel - 15.0)), mel * 200.0 / 3.0)


def mel_filters(n_mels: int, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE, fmin: float = 0.0,
                fmax: float = 8000.0) -> np.ndarray:
    """The mel filterbank (n_fft // 2 + 1, n_mels) Whisper uses (librosa's default): triangles spaced evenly on
    Slaney's mel scale between fmin and fmax, each scaled to unit area (Slaney normalisation)."""
    if n_mels < 1:
        raise ValueError(f"n_mels must be >= 1, got {n_mels}")
    freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(fmin)), _hz_to_mel(np.array(fmax)), n_mels + 2))
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (freqs[:, None] - lower) / (centre - lower)
    falling = (upper - freqs[:, None]) / (upper - centre)
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    return (triangles * (2.0 / (upper - lower))).astype(np.float32)


def _windowed_dft(n_fft: int) -> np.ndarray:
    """(n_fft, 2 * (n_fft // 2 + 1)): frame @ this = the real parts, then the imaginary parts, of the spectrum of
    the Hann-windowed frame. The angles are taken from k * n mod n_fft (exact integers), so that they stay accurate
    for every bin."""
    n = np.arange(n_fft)
    k = np.arange(n_fft // 2 + 1)
    angle = 2 * np.pi * ((n[:, None] * k[None, :]) % n_fft) / n_fft
    window = hann_window(n_fft).astype(np.float64)[:, None]
    return np.concatenate([window * np.cos(angle), -window * np.sin(angle)], axis=1).astype(np.float32)


class LogMelSpectrogram:
    """Whisper's input features: audio (samples,) or (batch, samples) at 16 kHz -> (batch, n_mels, n_samples //
    hop_length), the audio first padded with zeros (or trimmed) to n_samples.

    As Whisper (and torch.stft with center=True) computes them: the signal is reflect-padded by n_fft / 2 at both
    ends and cut into frames of n_fft samples every hop_length; each frame's power spectrum (Hann window) is summed
    into mel bands, the last frame is dropped, and the log10 power is clamped to 8 below each utterance's maximum and
    mapped by (x + 4) / 4. Everything after the filterbank's construction is Tensor ops (views, matmuls and
    elementwise), so it runs on any device."""

    def __init__(self, n_mels: int = 80, n_samples: int = 30 * SAMPLE_RATE, n_fft: int = N_FFT,
                 hop_length: int = HOP_LENGTH, device: str | None = None):
        if n_samples < n_fft or n_samples % hop_length:
            raise ValueError(f"n_samples must be a multiple of hop_length={hop_length} of at least n_fft={n_fft}, "
                             f"got {n_samples}")
        self.n_mels, self.n_samples, self.n_fft, self.hop_length = n_mels, n_samples, n_fft, hop_length
        self.n_frames = n_samples // hop_length
        self.device = device
        self._dft = Tensor(_windowed_dft(n_fft), device=device).realize()
        self._filters = Tensor(mel_filters(n_mels, n_fft), device=device).realize()

    def __call__(self, audio: Tensor | np.ndarray | Sequence[float]) -> Tensor:
        if not isinstance(audio, Tensor):
            # host samples are fitted to the window here, so that every length gives the same kernels
            a = np.asarray(audio, np.float32)
            if a.ndim in (1, 2) and a.shape[-1] > 0:
                fitted = np.zeros((*a.shape[:-1], self.n_samples), np.float32)
                fitted[..., :min(a.shape[-1], self.n_samples)] = a[..., :self.n_samples]
                a = fitted
            audio = Tensor(a, device=self.device)
        x = audio
        if x.ndim == 1:
            x = x.unsqueeze(0)
        if x.ndim != 2 or x.shape[1] == 0:
            raise ValueError(f"audio must be (samples,) or (batch, samples) with at least one sample, got {x.shape}")
        x = x.float()
        L = x.shape[1]
        # the model's window: silence after short audio, the first n_samples of long audio
        x = x.pad((0, self.n_samples - L)) if L < self.n_samples else x[:, :self.n_samples]
        half = self.n_fft // 2
        x = x.pad((half, half), mode="reflect")  # centred frames, as torch.stft(center=True)
        # (B, F, n_fft), the frame centred on the last sample left out. Copied out once: the matmul then reads plain
        # rows instead of indexing through the views of every frame (several times faster on the CPU)
        frames = self._frames(x, self.n_frames).contiguous()
        spectrum = frames @ self._dft  # (B, F, 2 * bins): real parts, then imaginary parts
        bins = self.n_fft // 2 + 1
        power = spectrum[..., :bins].square() + spectrum[..., bins:].square()
        mel = (power @ self._filters).transpose(1, 2)  # (B, n_mels, F)
        log_spec = mel.maximum(1e-10).log10()
        peak = log_spec.max(axis=(1, 2), keepdim=True)
        return (log_spec.maximum(peak - 8.0) + 4.0) / 4.0

    def _frames(self, x: Tensor, count: int) -> Tensor:
        """The first `count` windows of n_fft samples, hop_length apart, of x (B, samples) as (B, count, n_fft).
        Views only: the signal is cut into rows of hop_length samples, and a frame is `per_frame` consecutive rows
        (the last one partly): so frame f is row f, then row f + 1, ... laid side by side."""
        hop, B = self.hop_length, x.shape[0]
        per_frame = -(-self.n_fft // hop)
        rows = count + per_frame - 1
        need = rows * hop
        x = x.pad((0, need - x.shape[1])) if x.shape[1] < need else x[:, :need]  # padding only feeds cut-off columns
        chunks = x.reshape(B, rows, hop)
        frames = Tensor.cat(*[chunks[:, j:j + count] for j in range(per_frame)], dim=2)
        return frames[:, :, :self.n_fft]


# ---- configuration ------------------------------------------------------------------------------------------------

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": lambda x: x.gelu(approximate="none"), "gelu_new": lambda x: x.gelu(),
    "gelu_pytorch_tanh": lambda x: x.gelu(), "relu": lambda x: x.relu(), "silu": lambda x: x.silu(),
    "swish": lambda x: x.silu(),
}


@dataclass(frozen=True)
class WhisperConfig:
    vocab_size: int
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    max_source_positions: int = 1500
    max_target_positions: int = 448
    activation_function: str = "gelu"
    tie_word_embeddings: bool = True

    @staticmethod
    def from_hf(cfg: Mapping[str, Any]) -> WhisperConfig:
        """From a Hugging Face config.json dict of model_type "whisper"."""
        if cfg.get("model_type", "whisper") != "whisper":
            raise ConfigError(f"Whisper loads model_type 'whisper', not {cfg.get('model_type')!r}")
        act = cfg.get("activation_function", "gelu")
        if act not in _ACTIVATIONS:
            raise ConfigError(f"activation_function {act!r} is not supported (supported: {sorted(_ACTIVATIONS)})")
        out = WhisperConfig(
            vocab_size=int(_need(cfg, "vocab_size")), num_mel_bins=int(_need(cfg, "num_mel_bins")),
            d_model=int(_need(cfg, "d_model")), encoder_layers=int(_need(cfg, "encoder_layers")),
            encoder_attention_heads=int(_need(cfg, "encoder_attention_heads")),
            encoder_ffn_dim=int(_need(cfg, "encoder_ffn_dim")), decoder_layers=int(_need(cfg, "decoder_layers")),
            decoder_attention_heads=int(_need(cfg, "decoder_attention_heads")),
            decoder_ffn_dim=int(_need(cfg, "decoder_ffn_dim")),
            max_source_positions=int(cfg.get("max_source_positions", 1500)),
            max_target_positions=int(cfg.get("max_target_positions", 448)), activation_function=act,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)))
        for heads in (out.encoder_attention_heads, out.decoder_attention_heads):
            if out.d_model % heads:
                raise ConfigError(f"d_model={out.d_model} must be a multiple of the attention heads ({heads})")
        return out


@dataclass(frozen=True)
class WhisperGenerationConfig:
    """The decoding settings of a checkpoint: generation_config.json where there is one, else config.json's."""
    decoder_start_token_id: int
    eos_token_ids: tuple[int, ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()  # suppressed at the first generated position only
    no_timestamps_token_id: int | None = None
    lang_to_id: Mapping[str, int] = field(default_factory=dict)  # "<|en|>" -> id (multilingual models)
    task_to_id: Mapping[str, int] = field(default_factory=dict)  # "transcribe" / "translate" -> id

    @staticmethod
    def from_hf(cfg: Mapping[str, Any], generation: Mapping[str, Any] | None = None) -> WhisperGenerationConfig:
        g = dict(cfg) if generation is None else {**cfg, **generation}
        eos = g.get("eos_token_id")
        return WhisperGenerationConfig(
            decoder_start_token_id=int(_need(g, "decoder_start_token_id")),
            eos_token_ids=tuple(int(i) for i in (eos if isinstance(eos, list) else [eos]) if i is not None),
            suppress_tokens=tuple(int(i) for i in g.get("suppress_tokens") or ()),
            begin_suppress_tokens=tuple(int(i) for i in g.get("begin_suppress_tokens") or ()),
            no_timestamps_token_id=None if g.get("no_timestamps_token_id") is None else
            int(g["no_timestamps_token_id"]),
            lang_to_id={str(k): int(v) for k, v in (g.get("lang_to_id") or {}).items()},
            task_to_id={str(k): int(v) for k, v in (g.get("task_to_id") or {}).items()})


# ---- layers -------------------------------------------------------------------------------------------------------

class WhisperAttention:
    """Multi-head attention with Whisper's projections (no bias on k_proj). Self-attention in the encoder, cached
    causal self-attention or cross-attention over the encoder states in the decoder; the cache of either kind is a
    KVCache (see tinygrad.nn.transformer) realized once and written in place."""

    def __init__(self, dim: int, n_heads: int, dtype: DType):
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.scale = self.head_dim ** -0.5
        self.q_proj = Linear(dim, dim, True, dtype)
        self.k_proj = Linear(dim, dim, False, dtype)
        self.v_proj = Linear(dim, dim, True, dtype)
        self.out_proj = Linear(dim, dim, True, dtype)
        self._cache: KVCache | None = None

    def _heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2)

    def _attend(self, x: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None) -> Tensor:
        B, T, C = x.shape
        # the query is scaled before the product (and the product not after), the order of the reference model
        q = self._heads(self.q_proj(x) * self.scale)
        out = q.scaled_dot_product_attention(keys, values, attn_mask=mask, scale=1.0)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C))

    def __call__(self, x: Tensor) -> Tensor:
        """Self-attention over the whole sequence (the encoder's)."""
        return self._attend(x, self._heads(self.k_proj(x)), self._heads(self.v_proj(x)))

    def cached(self, x: Tensor, start_pos: Pos, mask: Tensor | None) -> Tensor:
        """Causal self-attention of tokens at start_pos .. start_pos+T-1 over every earlier one (the KV cache)."""
        if self._cache is None:
            raise RuntimeError("the decoder has no KV cache; decode through Whisper (it makes one per batch size)")
        keys, values = self._cache.update(self._heads(self.k_proj(x)), self._heads(self.v_proj(x)), start_pos)
        return self._attend(x, keys, values, mask)

    def set_memory(self, states: Tensor) -> None:
        """Compute the cross-attention keys and values of encoder states (B, S, dim) into this layer's cache."""
        B, S, _ = states.shape
        if self._cache is None or self._cache.kv.shape[1] != B or self._cache.max_context != S:
            self._cache = KVCache(int(B), self.n_heads, int(S), self.head_dim, self.k_proj.weight.dtype,
                                  states.device if isinstance(states.device, str) else None)
        self._cache.update(self._heads(self.k_proj(states)), self._heads(self.v_proj(states)), 0)

    def cross(self, x: Tensor) -> Tensor:
        """Attention of the decoder's tokens over the encoder states given to set_memory."""
        if self._cache is None:
            raise RuntimeError("no encoder states: call Whisper.set_audio (or transcribe) before decoding")
        return self._attend(x, self._cache.kv[0], self._cache.kv[1])


class WhisperEncoderLayer:
    def __init__(self, cfg: WhisperConfig, dtype: DType):
        self.self_attn = WhisperAttention(cfg.d_model, cfg.encoder_attention_heads, dtype)
        self.self_attn_layer_norm = LayerNorm(cfg.d_model)
        self.fc1 = Linear(cfg.d_model, cfg.encoder_ffn_dim, True, dtype)
        self.fc2 = Linear(cfg.encoder_ffn_dim, cfg.d_model, True, dtype)
        self.final_layer_norm = LayerNorm(cfg.d_model)
        self._act = _ACTIVATIONS[cfg.activation_function]

    def __call__(self, x: Tensor) -> Tensor:
        h = x + self.self_attn(self.self_attn_layer_norm(x).cast(x.dtype))
        return h + self.fc2(self._act(self.fc1(self.final_layer_norm(h).cast(h.dtype))))


class WhisperDecoderLayer:
    def __init__(self, cfg: WhisperConfig, dtype: DType):
        self.self_attn = WhisperAttention(cfg.d_model, cfg.decoder_attention_heads, dtype)
        self.self_attn_layer_norm = LayerNorm(cfg.d_model)
        self.encoder_attn = WhisperAttention(cfg.d_model, cfg.decoder_attention_heads, dtype)
        self.encoder_attn_layer_norm = LayerNorm(cfg.d_model)
        self.fc1 = Linear(cfg.d_model, cfg.decoder_ffn_dim, True, dtype)
        self.fc2 = Linear(cfg.decoder_ffn_dim, cfg.d_model, True, dtype)
        self.final_layer_norm = LayerNorm(cfg.d_model)
        self._act = _ACTIVATIONS[cfg.activation_function]

    def __call__(self, x: Tensor, start_pos: Pos, mask: Tensor | None) -> Tensor:
        h = x + self.self_attn.cached(self.self_attn_layer_norm(x).cast(x.dtype), start_pos, mask)
        h = h + self.encoder_attn.cross(self.encoder_attn_layer_norm(h).cast(h.dtype))
        return h + self.fc2(self._act(self.fc1(self.final_layer_norm(h).cast(h.dtype))))


class Conv1d:
    """Weight (out, in, kernel) and bias as PyTorch's Conv1d stores them; drawn by no initialiser (see
    transformer.Linear: the weights come from a checkpoint)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, padding: int, dtype: DType):
        self.weight = Tensor.empty(cout, cin, kernel, dtype=dtype)
        self.bias = Tensor.empty(cout, dtype=dtype)
        self.stride, self.padding = stride, padding

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(self.weight, self.bias, stride=self.stride, padding=self.padding)


class WhisperEncoder:
    def __init__(self, cfg: WhisperConfig, dtype: DType):
        self.conv1 = Conv1d(cfg.num_mel_bins, cfg.d_model, 3, 1, 1, dtype)
        self.conv2 = Conv1d(cfg.d_model, cfg.d_model, 3, 2, 1, dtype)
        # sinusoidal positions; the published checkpoints store the table too, and load over this one
        self.embed_positions = Embedding(cfg.max_source_positions, cfg.d_model, dtype)
        self.embed_positions.weight = Tensor(sinusoids(cfg.max_source_positions, cfg.d_model)).cast(dtype)
        self.layers = [WhisperEncoderLayer(cfg, dtype) for _ in range(cfg.encoder_layers)]
        self.layer_norm = LayerNorm(cfg.d_model)


class WhisperDecoder:
    def __init__(self, cfg: WhisperConfig, dtype: DType):
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.d_model, dtype)
        self.embed_positions = Embedding(cfg.max_target_positions, cfg.d_model, dtype)
        self.layers = [WhisperDecoderLayer(cfg, dtype) for _ in range(cfg.decoder_layers)]
        self.layer_norm = LayerNorm(cfg.d_model)


class _WhisperBody:
    def __init__(self, cfg: WhisperConfig, dtype: DType):
        self.encoder = WhisperEncoder(cfg, dtype)
        self.decoder = WhisperDecoder(cfg, dtype)


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """Whisper's encoder positions (length, channels): sines then cosines of position * timescale, the timescales
    spaced geometrically from 1 to 1 / max_timescale."""
    if channels % 2 or channels < 4:
        raise ConfigError(f"sinusoidal positions need an even number of channels >= 4, got {channels}")
    rates = np.exp(-math.log(max_timescale) / (channels // 2 - 1) * np.arange(channels // 2))
    t = np.arange(length)[:, None] * rates[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


# ---- the model ----------------------------------------------------------------------------------------------------

class Whisper:
    """Whisper's encoder-decoder. Attribute names follow Hugging Face's WhisperForConditionalGeneration, so that its
    checkpoints load by name. `generation` holds the decoding settings (from_pretrained reads the checkpoint's);
    without it the start token is 0 and nothing is suppressed."""

    def __init__(self, config: WhisperConfig, generation: WhisperGenerationConfig | None = None,
                 dtype: DTypeLike | None = None, device: str | None = None):
        self.config, self.device = config, device
        self.dtype = to_dtype(dtype) if dtype is not None else dtypes.float32
        if not self.dtype.is_float:
            raise ValueError(f"the model dtype must be a float type, got {self.dtype}")
        self.generation = generation or WhisperGenerationConfig(decoder_start_token_id=0)
        self.model = _WhisperBody(config, self.dtype)
        self.proj_out = None if config.tie_word_embeddings else Linear(config.d_model, config.vocab_size, False,
                                                                      self.dtype)
        #: the model's window of audio: 2 mel frames per encoder position (conv2 has stride 2)
        self.n_samples = 2 * config.max_source_positions * HOP_LENGTH
        self.log_mel = LogMelSpectrogram(config.num_mel_bins, self.n_samples, device=device)
        self._batch: int | None = None
        self._steps: dict[int, TinyJit] = {}
        self._suppress: Tensor | None = None
        self._audio: Tensor | None = None  # the encoder states whose keys and values the cross caches hold

    # -- loading --
    @classmethod
    def from_pretrained(cls, directory: str | pathlib.Path, dtype: DTypeLike | None = None,
                        device: str | None = None) -> Whisper:
        """A Hugging Face Whisper directory: config.json and model.safetensors (or a sharded index), and the
        decoding settings of generation_config.json where it exists."""
        raw = _read_config(directory)
        config = WhisperConfig.from_hf(raw)
        gen_path = pathlib.Path(directory) / "generation_config.json"
        generation = None
        if gen_path.is_file():
            try:
                generation = json.loads(gen_path.read_text())
            except json.JSONDecodeError as e:
                raise ConfigError(f"{gen_path} is not valid JSON: {e}") from e
        model = cls(config, WhisperGenerationConfig.from_hf(raw, generation), dtype, device)
        weights = {}
        for name, t in load_hf_weights(directory, device).items():
            if name == "proj_out.weight" and config.tie_word_embeddings:
                continue  # tied: the output projection is the token embedding
            weights[name] = t
        if "model.encoder.embed_positions.weight" not in weights:  # then the sinusoids computed at construction
            weights["model.encoder.embed_positions.weight"] = model.model.encoder.embed_positions.weight
        _install(model, weights, f"the checkpoint in {directory}")
        return model

    # -- encoder --
    def encode(self, mel: Tensor) -> Tensor:
        """Encoder states (B, max_source_positions, d_model) of log-mel features (B, num_mel_bins, frames)."""
        cfg, enc = self.config, self.model.encoder
        frames = 2 * cfg.max_source_positions
        if mel.ndim != 3 or mel.shape[1] != cfg.num_mel_bins or mel.shape[2] != frames:
            raise ValueError(f"the encoder takes log-mel features (batch, {cfg.num_mel_bins}, {frames}), got "
                             f"{mel.shape}; make them with model.log_mel(audio), which pads the audio to the window")
        act = _ACTIVATIONS["gelu"]  # the stem's GELU is fixed, whatever the layers' activation
        x = act(enc.conv1(mel.cast(self.dtype)))
        x = act(enc.conv2(x)).transpose(1, 2) + enc.embed_positions.weight
        for layer in enc.layers:
            x = layer(x).realize()
        return enc.layer_norm(x).cast(self.dtype)

    # -- decoder --
    def set_audio(self, audio_features: Tensor) -> None:
        """Make every decoder layer's cross-attention keys and values of encoder states (B, S, d_model), once per
        utterance, and caches for batch B; decoding then reads them."""
        B = int(audio_features.shape[0])
        if audio_features is not self._audio:  # the same states again (language detection, then decoding): kept
            for layer in self.model.decoder.layers:
                layer.encoder_attn.set_memory(audio_features)
            self._audio = audio_features
        if self._batch != B:
            for layer in self.model.decoder.layers:
                a = layer.self_attn
                a._cache = KVCache(B, a.n_heads, self.config.max_target_positions, a.head_dim, self.dtype,
                                   self.device)
            self._batch = B
            self._steps.clear()  # their captures hold the old caches' buffers

    def decode(self, tokens: Tensor, start_pos: Pos = 0) -> Tensor:
        """Logits (B, T, vocab) of tokens (B, T) at positions start_pos .. start_pos+T-1, each seeing the tokens
        before it (this call's and, through the KV cache, earlier calls') and the audio of the last set_audio."""
        if self._batch is None:
            raise RuntimeError("no audio: call set_audio(model.encode(mel)) before decode")
        if tokens.ndim != 2 or tokens.shape[0] != self._batch:
            raise ValueError(f"tokens must be (batch={self._batch}, length) ids, got shape {tokens.shape}")
        T = int(tokens.shape[1])
        limit = self.config.max_target_positions
        if isinstance(start_pos, int) and not 0 <= start_pos <= limit - T:
            raise ValueError(f"positions {start_pos} .. {start_pos + T - 1} are past the decoder's "
                             f"max_target_positions={limit}")
        dec = self.model.decoder
        x = dec.embed_tokens(tokens) + dec.embed_positions.weight[start_pos:start_pos + T]
        mask = None
        if T > 1:  # a single query sees every cached key; several see only those up to their own position
            assert isinstance(start_pos, int), "multi-token decoding takes a plain start position"
            q_pos = Tensor.arange(T, device=self.device).reshape(-1, 1) + start_pos
            mask = Tensor.arange(start_pos + T, device=self.device).reshape(1, -1) <= q_pos
        for layer in dec.layers:
            # realized per layer: the cache write realizes inside the next layer, which would recompute this one
            x = layer(x, start_pos, mask).realize()
        h = dec.layer_norm(x).cast(self.dtype)
        return self.proj_out(h) if self.proj_out is not None else h.linear(dec.embed_tokens.weight.T)

    def _suppressed(self) -> Tensor:
        """0 for every token, -inf for the checkpoint's suppress_tokens (never generated)."""
        if self._suppress is None:
            bias = np.zeros(self.config.vocab_size, np.float32)
            bias[[t for t in self.generation.suppress_tokens if 0 <= t < self.config.vocab_size]] = -np.inf
            self._suppress = Tensor(bias, device=self.device).realize()
        return self._suppress

    def _step(self, batch: int) -> TinyJit:
        """The jitted one-token greedy step for this batch size (its capture holds this batch's caches)."""
        if batch not in self._steps:
            def step(tokens: Tensor, start_pos: UOp) -> Tensor:
                logits = self.decode(tokens, start_pos)[:, -1].float() + self._suppressed()
                return logits.argmax(-1).cast(dtypes.int32).realize()
            self._steps[batch] = TinyJit(step)
        return self._steps[batch]

    # -- generation --
    def prompt(self, language: str | None = None, task: str | None = None, timestamps: bool = False) -> list[int]:
        """The decoder's first tokens, as Hugging Face's generate makes them: the start token; for a multilingual
        checkpoint the language (a code such as "en" or "<|en|>"; None: detect it, see transcribe) and the task
        ("transcribe" or "translate"); then the no-timestamps token where the checkpoint has one and timestamps
        are not asked for. A language that is not None here but the checkpoint lacks is an error."""
        g = self.generation
        ids = [g.decoder_start_token_id]
        if language is not None:
            ids.append(self.language_id(language))
        if task is not None:
            if task not in g.task_to_id:
                raise ValueError(f"task {task!r} is not one of this checkpoint's tasks {sorted(g.task_to_id)}"
                                 if g.task_to_id else f"this checkpoint has no tasks (no task_to_id in "
                                                      f"generation_config.json); drop task={task!r}")
            ids.append(g.task_to_id[task])
        if not timestamps and g.no_timestamps_token_id is not None:
            ids.append(g.no_timestamps_token_id)
        return ids

    def language_id(self, language: str) -> int:
        g = self.generation
        if not g.lang_to_id:
            raise ValueError(f"this checkpoint is not multilingual (no lang_to_id in generation_config.json); drop "
                             f"the language {language!r}")
        key = language if language.startswith("<|") else f"<|{language.lower()}|>"
        if key not in g.lang_to_id:
            raise ValueError(f"unknown language {language!r}; this checkpoint knows "
                             f"{', '.join(k.strip('<|>') for k in g.lang_to_id)}")
        return g.lang_to_id[key]

    def detect_language(self) -> list[int]:
        """The most likely language token per utterance of the last set_audio: the decoder's first prediction
        after the start token, among the language tokens only."""
        g = self.generation
        if not g.lang_to_id:
            raise ValueError("this checkpoint is not multilingual (no lang_to_id in generation_config.json)")
        assert self._batch is not None
        start = Tensor(np.full((self._batch, 1), g.decoder_start_token_id, np.int32), device=self.device)
        logits = self.decode(start, 0)[:, -1].float()
        allowed = np.full(self.config.vocab_size, -np.inf, np.float32)
        allowed[list(g.lang_to_id.values())] = 0.0
        best = (logits + Tensor(allowed, device=self.device)).argmax(-1)
        return [int(t) for t in best.numpy().reshape(-1)]

    def generate(self, audio_features: Tensor, prompt: Sequence[int] | Sequence[Sequence[int]],
                 max_new_tokens: int | None = None) -> Iterator[list[int]]:
        """Greedy decoding after `prompt` (one list of ids for every utterance, or one per utterance, all of the
        same length), over encoder states (B, S, d_model): yields the next id of every utterance, step after step,
        until each has produced an end-of-text token or after max_new_tokens (default: up to the decoder's
        max_target_positions). The checkpoint's suppress_tokens are never produced, its begin_suppress_tokens not
        first. Utterances that ended keep producing tokens: ignore them."""
        B = int(audio_features.shape[0])
        if prompt and not isinstance(prompt[0], int):
            rows = [[int(t) for t in p] for p in cast(Sequence[Sequence[int]], prompt)]
        else:
            rows = [[int(t) for t in cast(Sequence[int], prompt)] for _ in range(B)]
        if len(rows) != B or not rows[0] or any(len(r) != len(rows[0]) for r in rows):
            raise ValueError(f"prompt must be one non-empty list of ids, or {B} of the same length (one per "
                             f"utterance)")
        V = self.config.vocab_size
        if any(not 0 <= t < V for r in rows for t in r):
            raise ValueError(f"the prompt has ids outside the vocabulary of {V}")
        limit = self.config.max_target_positions
        P = len(rows[0])
        room = limit - P
        n = room if max_new_tokens is None else max_new_tokens
        if not 0 <= n <= room:
            raise ValueError(f"max_new_tokens must be in [0, {room}] (max_target_positions={limit} less the prompt's "
                             f"{P} tokens), got {max_new_tokens}")
        if n == 0:
            return
        self.set_audio(audio_features)
        step = self._step(B)  # after set_audio: new caches drop the steps captured over the old ones
        begin = np.zeros(V, np.float32)
        begin[[t for t in self.generation.begin_suppress_tokens if 0 <= t < V]] = -np.inf
        logits = self.decode(Tensor(np.array(rows, np.int32), device=self.device), 0)[:, -1].float()
        first = (logits + self._suppressed() + Tensor(begin, device=self.device)).argmax(-1)
        nxt = [int(t) for t in first.numpy().reshape(-1)]
        stops, done, pos = set(self.generation.eos_token_ids), [False] * B, P
        for i in range(n):
            yield nxt
            done = [d or t in stops for d, t in zip(done, nxt)]
            if all(done) or i == n - 1:
                return
            # bind exists on a Variable's UOp at run time; its annotation does not show it
            start = Variable("start_pos", 1, limit - 1).bind(pos)  # type: ignore[attr-defined]
            out = step(Tensor(np.array([[t] for t in nxt], np.int32), device=self.device), start)
            nxt = [int(t) for t in out.numpy().reshape(-1)]
            pos += 1

    def transcribe(self, audio: Tensor | np.ndarray | Sequence[np.ndarray], language: str | None = None,
                   task: str | None = None, max_new_tokens: int | None = None) -> list[list[int]]:
        """The generated ids (the prompt left out, the end-of-text token kept when produced) of each utterance:
        audio (samples,) or (batch, samples), or a list of 1-D arrays of any lengths, 16 kHz; each one's first
        n_samples (30 s for the published models) are heard. A multilingual checkpoint transcribes in `language`,
        detected per utterance when None; task defaults to "transcribe" where the checkpoint has tasks."""
        samples: Tensor | np.ndarray
        if isinstance(audio, (list, tuple)):  # clips of any lengths: each padded or trimmed to the window
            clips = [np.asarray(a, np.float32).reshape(-1)[:self.n_samples] for a in audio]
            samples = np.zeros((len(clips), self.n_samples), np.float32)
            for row, clip in zip(samples, clips):
                row[:clip.size] = clip
        else:
            samples = audio if isinstance(audio, Tensor) else np.asarray(audio, np.float32)
        states = self.encode(self.log_mel(samples)).realize()
        B = int(states.shape[0])
        g = self.generation
        if task is None and g.task_to_id:
            task = "transcribe"
        prompts = [self.prompt(language, task)] * B
        if g.lang_to_id and language is None:
            self.set_audio(states)
            prompts = [[p[0], lang, *p[1:]] for p, lang in zip(prompts, self.detect_language())]
        out: list[list[int]] = [[] for _ in range(B)]
        done = [False] * B
        for ids in self.generate(states, prompts, max_new_tokens):
            for row, t, d in zip(out, ids, done):
                if not d:
                    row.append(t)
            done = [d or t in g.eos_token_ids for d, t in zip(done, ids)]
        return out
