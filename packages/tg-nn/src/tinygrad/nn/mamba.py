"""Mamba, the selective state-space language model, in the layout of Hugging Face's `MambaForCausalLM` (the
state-spaces/mamba-*-hf checkpoints: config.json with model.safetensors or a sharded index).

    from tinygrad.nn.mamba import Mamba
    from tinygrad.nn.transformer import load_tokenizer
    model = Mamba.from_pretrained("path/to/mamba-130m-hf")
    tok = load_tokenizer("path/to/mamba-130m-hf")
    print(tok.decode(list(model.generate(tok.encode("Mamba is").ids, 32))))

How it runs. Each layer keeps a fixed-size state per sequence: the last conv_kernel-1 inputs of its causal
convolution and the (intermediate_size, state_size) state of its linear recurrence

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * B_t * x_t,        y_t = C_t . h_t + D * x_t

where dt, B and C depend on the input (the "selective" part). `forward(tokens)` continues every sequence of the
batch from its current state and leaves the state after the last token, as a KV cache would. A call over many
tokens (the prompt) computes every h_t at once with `selective_scan`, a chunked scan of Tensor ops; a call over one
token takes the recurrence's single step. `generate` runs the prompt through `forward`, then each new token is a
replay of a `TinyJit` step: its shapes never change, since the state does not grow with the context.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tinygrad import Tensor, TinyJit, dtypes
from tinygrad.dtype import DType, DTypeLike
from tinygrad.nn.training import is_training
from tinygrad.nn.transformer import (
    ConfigError,
    Embedding,
    Linear,
    _eos_ids,
    _install,
    _model_dtype,
    _need,
    _read_config,
    load_hf_weights,
    token_batch_shape,
)

__all__ = ["Mamba", "MambaBlock", "MambaConfig", "MambaMixer", "selective_scan"]


def selective_scan(dt: Tensor, A: Tensor, b: Tensor, h0: Tensor | None = None, chunk: int = 16) -> Tensor:
    """Every state of Mamba's linear recurrence h_t = exp(dt_t * A) * h_{t-1} + b_t along axis 1, from
    h_{-1} = h0 (zeros when None): the step sizes dt are (batch, T, D), A is (D, N), b is (batch, T, D, N), h0 is
    (batch, D, N); the result is (batch, T, D, N).

    The time axis is cut into chunks of `chunk` steps. Inside a chunk, with c_t the running sum of dt,
    h_t = sum_{s<=t} exp((c_t - c_s) A) b_s + exp(c_t A) h_in: one masked (chunk x chunk) product per chunk, all
    chunks at once. The states entering each chunk (h_in) follow the same recurrence one level up, chunk to chunk,
    with the chunk's summed dt and the state it builds on its own, so this function solves that with itself: the
    depth is log_chunk(T) levels of Tensor ops, and no step depends on Python running over time. Only differences
    c_t - c_s with s <= t reach the exponent, so with dt >= 0 and A <= 0 (the model's softplus and -exp) no
    exponent is positive and nothing can overflow. The running sums are over dt (batch, T, D), which A scales
    afterwards: A does not change with time, so the sums need not run over the N times larger dt * A."""
    if dt.ndim != 3 or A.ndim != 2 or b.ndim != 4:
        raise ValueError(f"dt must be (batch, T, D), A (D, N) and b (batch, T, D, N); got {dt.shape}, {A.shape} "
                         f"and {b.shape}")
    batch, T, D = dt.shape
    N = A.shape[1]
    if tuple(A.shape) != (D, N) or tuple(b.shape) != (batch, T, D, N):
        raise ValueError(f"dt {dt.shape}, A {A.shape} and b {b.shape} disagree: A must be (D, N) = ({D}, N) and "
                         f"b (batch, T, D, N) = {(batch, T, D, N)}")
    if h0 is not None and tuple(h0.shape) != (batch, D, N):
        raise ValueError(f"h0 must be (batch, D, N) = {(batch, D, N)}, got {h0.shape}")
    if chunk < 2:
        raise ValueError(f"chunk must be >= 2, got {chunk}")
    L = min(chunk, T)
    n = math.ceil(T / L)
    if n * L != T:  # pad the end of time: later steps never change earlier states, and are cut off below
        dt = dt.pad(((0, 0), (0, n * L - T), (0, 0)))
        b = b.pad(((0, 0), (0, n * L - T), (0, 0), (0, 0)))
    c = dt.reshape(batch, n, L, D).cumsum(axis=2)
    bb = b.reshape(batch, n, L, D, N)
    # (batch, n, t, s, D, N): the decay from step s to step t inside a chunk, zero where s is after t
    causal = Tensor.ones(L, L, dtype=dtypes.bool, device=dt.device).tril().reshape(1, 1, L, L, 1, 1)
    decay = causal.where((c.unsqueeze(3) - c.unsqueeze(2)).unsqueeze(-1) * A, -math.inf).exp()
    local = (decay * bb.unsqueeze(2)).sum(axis=3)  # the states each chunk builds from a zero start
    if n == 1 and h0 is None:
        states = local
    else:
        start = h0.unsqueeze(1) if h0 is not None else Tensor.zeros(batch, 1, D, N, dtype=local.dtype,
                                                                     device=dt.device)
        if n == 1:
            entering = start
        else:
            ends = selective_scan(c[:, :, -1], A, local[:, :, -1], h0, chunk)  # the true state at each chunk's end
            entering = start.cat(ends[:, :-1], dim=1)
        states = local + (c.unsqueeze(-1) * A).exp() * entering.unsqueeze(2)
    return states.reshape(batch, n * L, D, N)[:, :T]


@dataclass(frozen=True)
class MambaConfig:
    vocab_size: int
    hidden_size: int
    state_size: int
    num_hidden_layers: int
    intermediate_size: int
    time_step_rank: int
    conv_kernel: int = 4
    layer_norm_epsilon: float = 1e-5
    use_bias: bool = False  # biases of in_proj and out_proj
    use_conv_bias: bool = True
    residual_in_fp32: bool = True
    tie_word_embeddings: bool = True

    @staticmethod
    def from_hf(cfg: Mapping[str, Any]) -> MambaConfig:
        """From a Hugging Face config.json dict of model_type "mamba" (transformers' MambaConfig)."""
        kind = cfg.get("model_type", "mamba")
        if kind != "mamba":
            hint = " (Mamba-2 checkpoints have another layout)" if kind == "mamba2" else ""
            raise ConfigError(f"Mamba loads model_type 'mamba', not {kind!r}{hint}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"hidden_act {act!r} is not supported (Mamba's mixer uses 'silu')")
        dim = int(_need(cfg, "hidden_size"))
        rank = cfg.get("time_step_rank", "auto")
        rank = math.ceil(dim / 16) if rank == "auto" else int(rank)
        inner = int(cfg.get("intermediate_size") or int(cfg.get("expand", 2)) * dim)
        config = MambaConfig(
            vocab_size=int(_need(cfg, "vocab_size")), hidden_size=dim, state_size=int(cfg.get("state_size", 16)),
            num_hidden_layers=int(_need(cfg, "num_hidden_layers")), intermediate_size=inner, time_step_rank=rank,
            conv_kernel=int(cfg.get("conv_kernel", 4)), layer_norm_epsilon=float(cfg.get("layer_norm_epsilon", 1e-5)),
            use_bias=bool(cfg.get("use_bias", False)), use_conv_bias=bool(cfg.get("use_conv_bias", True)),
            residual_in_fp32=bool(cfg.get("residual_in_fp32", True)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)))
        for name in ("vocab_size", "hidden_size", "state_size", "num_hidden_layers", "intermediate_size",
                     "time_step_rank"):
            if getattr(config, name) < 1:
                raise ConfigError(f"config.json: {name} must be >= 1, got {getattr(config, name)}")
        if config.conv_kernel < 2:  # a kernel of 1 would keep no inputs: a state of size zero
            raise ConfigError(f"config.json: conv_kernel must be >= 2, got {config.conv_kernel}")
        return config


class _Conv1d:
    """The depthwise causal convolution's weights as Hugging Face stores them: weight (channels, 1, kernel)."""

    def __init__(self, channels: int, kernel: int, bias: bool, dtype: DType):
        self.weight = Tensor.empty(channels, 1, kernel, dtype=dtype)
        self.bias: Tensor | None = Tensor.empty(channels, dtype=dtype) if bias else None


class _RMSNorm:
    """transformers' MambaRMSNorm: normalised in float32, cast back, then scaled (in that order, as there)."""

    def __init__(self, dim: int, eps: float, dtype: DType):
        self.weight, self.eps = Tensor.empty(dim, dtype=dtype), eps

    def __call__(self, x: Tensor) -> Tensor:
        xf = x.float()
        return self.weight * (xf * (xf.square().mean(-1, keepdim=True) + self.eps).rsqrt()).cast(x.dtype)


def _zeroed(shape: tuple[int, ...], device: str | None) -> Tensor:
    """A float32 buffer of its own, zeroed from the host (see KVCache in nn.transformer for why not Tensor.zeros)."""
    t = Tensor.empty(*shape, dtype=dtypes.float32, device=device)
    memory = t._buffer()
    memory.copyin(memoryview(bytearray(memory.nbytes)))  # all-zero bytes are 0.0
    return t


class MambaMixer:
    """The selective state-space mixer: in_proj to (x, z); causal depthwise conv and SiLU on x; x_proj to the
    input-dependent (dt, B, C); dt_proj and softplus for the step sizes; the scan; y * silu(z); out_proj."""

    def __init__(self, cfg: MambaConfig, dtype: DType, chunk: int = 16):
        self.cfg, self.chunk = cfg, chunk
        D, N, R = cfg.intermediate_size, cfg.state_size, cfg.time_step_rank
        self.in_proj = Linear(cfg.hidden_size, 2 * D, cfg.use_bias, dtype)
        self.conv1d = _Conv1d(D, cfg.conv_kernel, cfg.use_conv_bias, dtype)
        self.x_proj = Linear(D, R + 2 * N, False, dtype)
        self.dt_proj = Linear(R, D, True, dtype)
        self.A_log = Tensor.empty(D, N, dtype=dtype)
        self.D = Tensor.empty(D, dtype=dtype)
        self.out_proj = Linear(D, cfg.hidden_size, cfg.use_bias, dtype)
        # the state (runtime, not weights: names starting with "_"): made by reset_state
        self._conv_state: Tensor | None = None  # (batch, conv_kernel - 1, D): the last inputs of the convolution
        self._ssm_state: Tensor | None = None  # (batch, D, N), float32

    def reset_state(self, batch: int, device: str | None) -> None:
        """Zero the state of `batch` sequences, in the buffers already there when the batch size is the same (so
        that a jitted step that captured them stays valid)."""
        K, D, N = self.cfg.conv_kernel, self.cfg.intermediate_size, self.cfg.state_size
        for name, shape in (("_conv_state", (batch, K - 1, D)), ("_ssm_state", (batch, D, N))):
            old = getattr(self, name)
            if old is not None and old.shape == shape:
                memory = old._buffer()
                memory.copyin(memoryview(bytearray(memory.nbytes)))
            else:
                setattr(self, name, _zeroed(shape, device))

    def _selective_inputs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """From the convolved inputs x (B, T, D): the step sizes dt (B, T, D) and B, C (B, T, N) in float32, and
        A = -exp(A_log) (D, N)."""
        N, R = self.cfg.state_size, self.cfg.time_step_rank
        dbc = self.x_proj(x)
        dt, Bm, Cm = dbc[..., :R], dbc[..., R:R + N], dbc[..., R + N:]
        dt = self.dt_proj(dt).float().softplus()
        return dt, Bm.float(), Cm.float(), -self.A_log.float().exp()

    def __call__(self, hidden: Tensor) -> Tensor:
        """Continue from the state with hidden (B, T, hidden_size); leaves the state after the last step."""
        conv_state, ssm_state = self.state()
        T, D, K = hidden.shape[1], self.cfg.intermediate_size, self.cfg.conv_kernel
        xz = self.in_proj(hidden)
        x, z = xz[..., :D], xz[..., D:]
        # causal depthwise convolution over the kept inputs followed by the new ones, one shifted product per tap
        window = conv_state.cast(x.dtype).cat(x, dim=1)  # (B, K-1+T, D)
        taps = self.conv1d.weight.reshape(D, K)
        conv = window[:, 0:T] * taps[:, 0]
        for k in range(1, K):
            conv = conv + window[:, k:k + T] * taps[:, k]
        if self.conv1d.bias is not None:
            conv = conv + self.conv1d.bias
        x = conv.silu()
        dt, Bm, Cm, A = self._selective_inputs(x)
        xf = x.float()
        if T == 1:  # the recurrence's single step
            h = (dt[:, 0, :, None] * A).exp() * ssm_state + (dt * xf)[:, 0, :, None] * Bm[:, 0, None, :]
            y = (h * Cm[:, 0, None, :]).sum(-1).unsqueeze(1)
            last = h
        else:  # every step at once
            states = selective_scan(dt, A, (dt * xf).unsqueeze(-1) * Bm.unsqueeze(2), ssm_state, self.chunk)
            y = (states * Cm.unsqueeze(2)).sum(-1)
            last = states[:, -1]
        y = (y + xf * self.D.float()).cast(hidden.dtype) * z.silu()
        self._keep(window[:, T:].cast(dtypes.float32), last)
        return self.out_proj(y)

    def _keep(self, conv: Tensor, ssm: Tensor) -> None:
        conv_state, ssm_state = self.state()
        if not is_training():  # the state is data, not a gradient path (see KVCache.update)
            conv, ssm = conv.detach(), ssm.detach()
        # assigned, not rebound: TinyJit carries an assigned tensor's new value from one replay to the next, while a
        # rebound attribute would leave the captured step reading the old one
        conv_state.assign(conv.contiguous())
        ssm_state.assign(ssm.contiguous())

    def state(self) -> list[Tensor]:
        """[conv state (batch, conv_kernel - 1, D), ssm state (batch, D, N)], both float32."""
        if self._conv_state is None or self._ssm_state is None:
            raise RuntimeError("this mixer has no state yet: call reset_state(batch, device) first")
        return [self._conv_state, self._ssm_state]


class MambaBlock:
    def __init__(self, cfg: MambaConfig, dtype: DType, chunk: int = 16):
        self.residual_in_fp32 = cfg.residual_in_fp32
        self.norm = _RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon, dtype)
        self.mixer = MambaMixer(cfg, dtype, chunk)

    def __call__(self, x: Tensor) -> Tensor:
        residual = x.float() if self.residual_in_fp32 else x
        return residual + self.mixer(self.norm(x.cast(self.norm.weight.dtype)))


class _MambaBody:
    def __init__(self, cfg: MambaConfig, dtype: DType, chunk: int):
        self.embeddings = Embedding(cfg.vocab_size, cfg.hidden_size, dtype)
        self.layers = [MambaBlock(cfg, dtype, chunk) for _ in range(cfg.num_hidden_layers)]
        self.norm_f = _RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon, dtype)


class Mamba:
    """Mamba (Gu and Dao, 2023): RMSNorm-ed residual blocks of a selective state-space mixer, the output tied to
    the token embedding unless the config says otherwise. Attribute names follow Hugging Face's MambaForCausalLM."""

    def __init__(self, config: MambaConfig, dtype: DTypeLike | None = None, device: str | None = None,
                 chunk: int = 16):
        self.config, self.dtype, self.device, self.chunk = config, _model_dtype(dtype), device, chunk
        self.vocab_size = config.vocab_size
        if chunk < 2:
            raise ValueError(f"chunk must be >= 2, got {chunk}")
        self.backbone = _MambaBody(config, self.dtype, chunk)
        self.lm_head = None if config.tie_word_embeddings else Linear(config.hidden_size, config.vocab_size, False,
                                                                      self.dtype)
        #: the end-of-text ids the checkpoint names (config.json's eos_token_id)
        self.eos_token_ids: list[int] = []
        self._batch: int | None = None
        self._step: TinyJit | None = None

    # -- state --
    def reset_state(self, batch_size: int = 1) -> None:
        """Start `batch_size` fresh sequences: every layer's state back to zeros."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self._batch != batch_size:
            self._step = None  # its capture holds the old state buffers
        for layer in self.backbone.layers:
            layer.mixer.reset_state(batch_size, self.device)
        self._batch = batch_size

    def state(self) -> list[Tensor]:
        """Every layer's (conv state, ssm state), flattened: a fixed size, whatever the length of the context."""
        return [t for layer in self.backbone.layers for t in layer.mixer.state()]

    # -- forward --
    def forward(self, tokens: Tensor) -> Tensor:
        """Logits (B, T, vocab) of tokens (B, T), continuing each row from the state the previous calls left (call
        reset_state(B) to start over; the first call makes the state), and leaving the state after the last token."""
        return self._logits(tokens, last_only=False)

    __call__ = forward

    def _logits(self, tokens: Tensor, last_only: bool) -> Tensor:
        B, T = token_batch_shape(tokens)
        if self._batch is None:
            self.reset_state(int(B))
        elif self._batch != B:
            raise ValueError(f"the state holds {self._batch} sequences but tokens has {B} rows: call "
                             f"reset_state({B}) to start new ones")
        x = self.backbone.embeddings(tokens)
        for layer in self.backbone.layers:
            x = layer(x)
            if T > 1:  # realized per layer, so a long prompt's scan is scheduled one layer at a time
                Tensor.realize(x, *layer.mixer.state())
        if T == 1:
            # the state written now, with the hidden states it came from: left lazy, the next call's graph would
            # hold this one's (and so on, step after step) until something read the state
            Tensor.realize(x, *self.state())
        h = self.backbone.norm_f(x).cast(self.dtype)
        if last_only:
            h = h[:, -1:]
        return self.lm_head(h) if self.lm_head is not None else h.linear(self.backbone.embeddings.weight.T)

    # -- generation --
    def _greedy_step(self, tokens: Tensor) -> Tensor:
        return self._logits(tokens, last_only=True)[:, -1].argmax(-1).realize()

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 stop_ids: Sequence[int] = ()) -> Iterator[int]:
        """The greedy continuation of one prompt, one id at a time; an id in stop_ids is yielded and ends it. The
        prompt goes through forward in one call (the chunked scan), then every new token is one replay of a jitted
        recurrent step. The state belongs to the model: run one generation at a time on it."""
        ids = [int(t) for t in prompt_ids]
        if isinstance(prompt_ids, (str, bytes)) or not ids:
            raise ValueError("prompt_ids must be a non-empty list of token ids (a BOS token, say)")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"the prompt has ids outside the vocabulary of {self.vocab_size}: {bad[:5]}")
        if max_new_tokens <= 0:
            return
        self.reset_state(1)
        nxt = int(self._logits(Tensor([ids], dtype=dtypes.int32, device=self.device), last_only=True)[0, -1]
                  .argmax().item())
        if self._step is None:
            self._step = TinyJit(self._greedy_step)
        stops = set(stop_ids)
        for i in range(max_new_tokens):
            yield nxt
            if nxt in stops or i == max_new_tokens - 1:
                return
            nxt = int(self._step(Tensor([[nxt]], dtype=dtypes.int32, device=self.device)).item())

    # -- checkpoints --
    @classmethod
    def from_pretrained(cls, directory: str | pathlib.Path, dtype: DTypeLike | None = None,
                        device: str | None = None, chunk: int = 16) -> Mamba:
        """A Hugging Face Mamba directory (config.json, and model.safetensors or a sharded index), as
        state-spaces/mamba-*-hf publish. `chunk`: the time steps of one chunk of the prompt's scan."""
        raw = _read_config(directory)
        config = MambaConfig.from_hf(raw)
        model = cls(config, dtype, device, chunk)
        model.eos_token_ids = _eos_ids(raw.get("eos_token_id"), config.vocab_size)
        weights = {}
        for name, t in load_hf_weights(directory, device).items():
            if name == "lm_head.weight" and config.tie_word_embeddings:
                continue  # tied: the output projection is the token embedding
            # the name older conversions used (transformers renames it on load too)
            weights[name.replace("backbone.embedding.", "backbone.embeddings.")] = t
        _install(model, weights, f"the checkpoint in {directory}")
        return model
