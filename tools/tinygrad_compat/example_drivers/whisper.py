"""examples/whisper.py: a tiny Whisper (1 encoder and 1 decoder layer, width 32, vocab 64) transcribing two seconds
of synthetic audio through the example's transcribe_waveform: prep_audio (its mel filterbank from
examples/audio_helpers, the log-mel scaling), the jitted encoder over a 30 s segment, and the greedy decoder loop
with its self-attention cache (a bound Variable) and cross-attention cache.
Outputs: the mel filterbank, the log-mel input, the encoded audio and the transcribed token ids."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())  # the workspace's examples/ package, ahead of the runner's examples.py on the path
import standins  # noqa: F401  (tinygrad internals' stand-ins, before any example import)
from _lm_common import numpy_weights, save, stub_module

RTOL = 1e-4
ATOL = 1e-4


def stft(y, n_fft, hop_length, window="hann", dtype=np.complex64):
    """librosa.stft's defaults (centred frames zero-padded by n_fft // 2, periodic Hann window), in numpy: both
    sides get the same spectrogram, so what is compared is everything after it."""
    assert window == "hann"
    y = np.pad(y, [(0, 0)] * (y.ndim - 1) + [(n_fft // 2, n_fft // 2)])
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    frames = 1 + (y.shape[-1] - n_fft) // hop_length
    idx = np.arange(n_fft)[None, :] + hop_length * np.arange(frames)[:, None]
    return np.fft.rfft(y[..., idx] * win, axis=-1).swapaxes(-1, -2).astype(dtype)


stub_module("librosa", stft=stft)

DIMS = {"n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 32, "n_audio_head": 2, "n_audio_layer": 1,
        "n_vocab": 64, "n_text_ctx": 16, "n_text_state": 32, "n_text_head": 2, "n_text_layer": 1}
SPECIALS = {"<|endoftext|>": 50, "<|startoftranscript|>": 51, "<|notimestamps|>": 52, "<|startofprev|>": 53,
            "<|transcribe|>": 54}


class IdEncoding:
    """Stands in for the tiktoken encoding: special token ids, and token ids "decoded" as text."""
    _special_tokens = SPECIALS

    def decode(self, toks):
        return " ".join(str(int(t)) for t in toks)


def main(out: str) -> None:
    from examples.audio_helpers import mel
    from tinygrad import Tensor
    from tinygrad.nn.state import load_state_dict

    import examples.whisper as whisper
    model = whisper.Whisper(DIMS, batch_size=1)
    load_state_dict(model, numpy_weights(model, seed=13), strict=False, verbose=False)

    t = np.arange(2 * whisper.RATE) / whisper.RATE
    rng = np.random.default_rng(14)
    wave = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1250 * t * (1 + t / 4))
            + 0.02 * rng.standard_normal(t.size)).astype(np.float32)

    filters = mel(sr=whisper.RATE, n_fft=whisper.N_FFT, n_mels=whisper.N_MELS).numpy()
    log_spec = whisper.prep_audio([wave], 1)
    encoded = model.encoder.encode(Tensor(log_spec[:, :, :whisper.FRAMES_PER_SEGMENT])).numpy()

    enc = IdEncoding()
    whisper.transcribe_waveform(model, enc, [wave])
    t0 = time.perf_counter()
    text = whisper.transcribe_waveform(model, enc, [wave])
    seconds = time.perf_counter() - t0
    tokens = np.array([int(x) for x in text.split()], dtype=np.int64)
    save(out, seconds, mel_filters=filters, log_spec=log_spec.astype(np.float32), encoded=encoded, tokens=tokens)


if __name__ == "__main__":
    main(sys.argv[1])
