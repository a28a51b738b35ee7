"""tinygrad.nn.whisper against Hugging Face transformers: a tiny WhisperForConditionalGeneration with seeded random
weights, saved with save_pretrained and loaded back. The log-mel features must match WhisperFeatureExtractor's (at
the tiny size and at the published one), the encoder states the reference encoder's, and greedy decoding must give
the ids of transformers' generate, with the checkpoint's suppressed tokens and, for a multilingual generation
config, its language, task and no-timestamps tokens. The decode step must compile once; WAV reading, the example and
the errors are checked too. Everything runs on Device.DEFAULT (DEV=CPU picks the CPU)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import wave

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from tinygrad import Device, Tensor  # noqa: E402
from tinygrad.nn.whisper import (  # noqa: E402
    ConfigError,
    LogMelSpectrogram,
    Whisper,
    WhisperConfig,
    load_wav,
)

ROOT = pathlib.Path(__file__).parents[3]
EXAMPLE = ROOT / "examples" / "whisper.py"
N_MELS, SOURCE_POSITIONS = 16, 50  # 100 mel frames: a window of 1 s
SUPPRESS, BEGIN_SUPPRESS, START, EOS = [5, 7], [3, 2], 1, 2
LANGS = {"<|en|>": 90, "<|de|>": 91, "<|fr|>": 92}
TASKS = {"transcribe": 93, "translate": 94}
NO_TIMESTAMPS = 95


def _signal(seconds: float, seed: int = 0, f0: float = 440.0) -> np.ndarray:
    """A rising tone with harmonics and noise: energy across the mel bands, quiet and loud parts."""
    t = np.arange(int(seconds * 16000)) / 16000
    rng = np.random.default_rng(seed)
    tone = sum(0.3 / k * np.sin(2 * np.pi * k * (f0 * t + 300 * t * t)) for k in (1, 2, 3))
    return (tone * np.minimum(1.0, 4 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    config = transformers.WhisperConfig(
        vocab_size=96, num_mel_bins=N_MELS, d_model=32, encoder_layers=2, encoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_layers=2, decoder_attention_heads=2, decoder_ffn_dim=64,
        max_source_positions=SOURCE_POSITIONS, max_target_positions=32, decoder_start_token_id=START,
        pad_token_id=0, bos_token_id=0, eos_token_id=EOS, suppress_tokens=SUPPRESS,
        begin_suppress_tokens=BEGIN_SUPPRESS)
    hf = transformers.WhisperForConditionalGeneration(config).eval()
    # weights far from transformers' small initialisation: with those, every step predicts the same token, which
    # would hide a wrong position or cache. The encoder's positions stay the sinusoids it was built with.
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name == "model.encoder.embed_positions.weight":
                continue
            if "layer_norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            else:
                p.normal_(0.0, 0.3)
    return hf


@pytest.fixture(scope="module")
def saved(hf_model, tmp_path_factory):
    """The tiny model saved twice: "plain" with the generation config of its model config (the prompt is the start
    token alone) and "multilingual" with language, task and no-timestamps tokens as the published checkpoints."""
    plain = tmp_path_factory.mktemp("whisper_plain")
    hf_model.save_pretrained(plain, safe_serialization=True)
    multi = tmp_path_factory.mktemp("whisper_multi")
    hf_model.save_pretrained(multi, safe_serialization=True)
    gen = json.loads((multi / "generation_config.json").read_text())
    gen.update(lang_to_id=LANGS, task_to_id=TASKS, no_timestamps_token_id=NO_TIMESTAMPS, is_multilingual=True)
    (multi / "generation_config.json").write_text(json.dumps(gen))
    return {"plain": plain, "multilingual": multi}


def _features(clips, n_mels: int = N_MELS, chunk_length: int = 1) -> np.ndarray:
    fe = transformers.WhisperFeatureExtractor(feature_size=n_mels, chunk_length=chunk_length)
    return fe(clips, sampling_rate=16000, return_tensors="np").input_features


def _hf_generate(hf, features: np.ndarray, n: int, **kwargs) -> list[list[int]]:
    with torch.no_grad():
        out = hf.generate(torch.tensor(features), max_new_tokens=n, do_sample=False, **kwargs)
    return out.tolist()


# ---- the front end -------------------------------------------------------------------------------------------------

def test_log_mel_matches_feature_extractor():
    # a short clip (padded with silence), a long one (trimmed to the window) and a silent one (the floor)
    clips = [_signal(0.6), _signal(1.4, seed=1, f0=200.0), np.zeros(3000, np.float32)]
    ref = _features(clips)
    front = LogMelSpectrogram(N_MELS, n_samples=16000)
    batch = np.zeros((3, 16000), np.float32)
    for row, clip in zip(batch, clips):
        row[:min(clip.size, 16000)] = clip[:16000]
    ours = front(batch).numpy()
    assert ours.shape == ref.shape == (3, N_MELS, 100)
    np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=0)
    # one clip of any length: padded or trimmed to the window by the front end itself, from the host or on the device
    np.testing.assert_allclose(front(clips[1]).numpy(), ref[1:2], atol=2e-5, rtol=0)
    np.testing.assert_allclose(front(Tensor(clips[0])).numpy(), ref[0:1], atol=2e-5, rtol=0)


def test_log_mel_published_size():
    """80 bands over a 30-second window, as the published models take them."""
    clip = _signal(7.0, seed=2)
    ref = _features(clip, n_mels=80, chunk_length=30)
    ours = LogMelSpectrogram(80).__call__(clip).numpy()
    assert ours.shape == ref.shape == (1, 80, 3000)
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


# ---- the encoder and greedy decoding -------------------------------------------------------------------------------

def test_encoder_matches(hf_model, saved):
    model = Whisper.from_pretrained(saved["plain"])
    features = _features([_signal(0.8), _signal(1.0, seed=3, f0=300.0)])
    with torch.no_grad():
        ref = hf_model.model.encoder(torch.tensor(features)).last_hidden_state.numpy()
    ours = model.encode(Tensor(features)).numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-4)
    # from audio: the front end and the encoder together
    np.testing.assert_allclose(model.encode(model.log_mel(_signal(0.8))).numpy(), ref[:1], atol=1e-4, rtol=1e-4)


def test_greedy_matches_generate(hf_model, saved):
    model = Whisper.from_pretrained(saved["plain"])
    clips = [_signal(0.8), _signal(1.0, seed=3, f0=300.0)]
    ref = _hf_generate(hf_model, _features(clips), 8)
    assert all(len(set(row)) > 2 for row in ref), "degenerate reference: the test would not see a wrong step"
    for i, clip in enumerate(clips):
        assert model.transcribe(clip, max_new_tokens=8) == [ref[i]]
    assert model.transcribe(clips, max_new_tokens=8) == ref  # a batch of two


def test_decode_step_compiles_once(saved):
    model = Whisper.from_pretrained(saved["plain"])
    runners = getattr(Device[Device.DEFAULT], "_runners", None)  # the compiled kernels, by AST
    first = model.transcribe(_signal(0.8), max_new_tokens=10)
    (step,) = model._steps.values()
    assert step.cnt == 2, "called eagerly once, captured once, replayed from then on"
    # another utterance: its cross-attention keys and values go into the same buffers and the capture is replayed.
    # Writing them over buffers the capture reads may take a copy kernel the first time; after that, nothing new
    second = model.transcribe(_signal(1.0, seed=5, f0=250.0), max_new_tokens=10)
    compiled = len(runners) if runners is not None else 0
    third = model.transcribe(_signal(0.6, seed=6, f0=350.0), max_new_tokens=10)
    assert list(model._steps.values()) == [step] and step.cnt == 2
    if runners is not None:
        assert len(runners) == compiled, "no kernel was compiled for the third utterance"
    assert model.transcribe(_signal(0.8), max_new_tokens=10) == first
    assert first != second != third


def test_multilingual_prompt_matches_generate(hf_model, saved):
    model = Whisper.from_pretrained(saved["multilingual"])
    gen = model.generation
    for key, value in (("lang_to_id", LANGS), ("task_to_id", TASKS), ("no_timestamps_token_id", NO_TIMESTAMPS)):
        setattr(hf_model.generation_config, key, value)
    hf_model.generation_config.is_multilingual = True
    try:
        clip = _signal(0.8)
        features = _features(clip)
        assert model.prompt("de", "transcribe") == [START, LANGS["<|de|>"], TASKS["transcribe"], NO_TIMESTAMPS]
        assert model.transcribe(clip, language="de", max_new_tokens=6) == \
            _hf_generate(hf_model, features, 6, language="de", task="transcribe")
        assert model.transcribe(clip, language="<|fr|>", task="translate", max_new_tokens=6) == \
            _hf_generate(hf_model, features, 6, language="fr", task="translate")
        # no language: detected from the audio, as generate does
        assert model.transcribe(clip, max_new_tokens=6) == _hf_generate(hf_model, features, 6, task="transcribe")
        model.set_audio(model.encode(model.log_mel(clip)))
        with torch.no_grad():
            assert model.detect_language() == hf_model.detect_language(torch.tensor(features)).tolist()
    finally:
        for key in ("lang_to_id", "task_to_id", "no_timestamps_token_id", "is_multilingual"):
            if hasattr(hf_model.generation_config, key):
                delattr(hf_model.generation_config, key)
    assert gen.eos_token_ids == (EOS,) and gen.suppress_tokens == tuple(SUPPRESS)


# ---- WAV files -----------------------------------------------------------------------------------------------------

def _write_wav(path: pathlib.Path, frames: bytes, width: int, channels: int = 1, rate: int = 16000) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)


def test_load_wav(tmp_path):
    x = np.array([0.0, 0.5, -0.5, 0.25, -1.0], np.float32)
    pcm16 = (x * 32767).round().astype("<i2")
    _write_wav(tmp_path / "mono16.wav", pcm16.tobytes(), 2)
    np.testing.assert_allclose(load_wav(tmp_path / "mono16.wav"), pcm16 / 32768.0, atol=1e-7)
    # stereo: the channels are averaged
    stereo = np.stack([pcm16, np.zeros_like(pcm16)], axis=1)
    _write_wav(tmp_path / "stereo.wav", stereo.tobytes(), 2, channels=2)
    np.testing.assert_allclose(load_wav(tmp_path / "stereo.wav"), pcm16 / 65536.0, atol=1e-7)
    # 24-bit little-endian triples, negative values included
    ints = (x * (2 ** 23 - 1)).round().astype(np.int32)
    triples = np.stack([(ints >> s) & 0xFF for s in (0, 8, 16)], axis=1).astype(np.uint8)
    _write_wav(tmp_path / "pcm24.wav", triples.tobytes(), 3)
    np.testing.assert_allclose(load_wav(tmp_path / "pcm24.wav"), ints / 2 ** 23, atol=1e-7)
    # 8-bit: unsigned around 128
    _write_wav(tmp_path / "pcm8.wav", bytes([128, 192, 64, 0]), 1)
    np.testing.assert_allclose(load_wav(tmp_path / "pcm8.wav"), [0.0, 0.5, -0.5, -1.0])
    _write_wav(tmp_path / "44k.wav", pcm16.tobytes(), 2, rate=44100)
    with pytest.raises(ValueError, match=r"44100 Hz.*resampling is not implemented.*ffmpeg"):
        load_wav(tmp_path / "44k.wav")
    (tmp_path / "junk.wav").write_bytes(b"not a wav file at all")
    with pytest.raises(ValueError, match="not a PCM WAV file"):
        load_wav(tmp_path / "junk.wav")


# ---- the example and the errors ------------------------------------------------------------------------------------

def test_example_end_to_end(hf_model, saved, tmp_path):
    clip = _signal(0.9, seed=7)
    pcm16 = (clip * 32767).round().astype("<i2")
    _write_wav(tmp_path / "speech.wav", pcm16.tobytes(), 2)
    ref = _hf_generate(hf_model, _features(pcm16 / np.float32(32768.0)), 8)[0]
    run = subprocess.run([sys.executable, str(EXAMPLE), "--model", str(saved["plain"]), "--audio",
                          str(tmp_path / "speech.wav"), "--max-tokens", "8"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert [int(t) for t in run.stdout.split()] == ref
    assert "tokens/s" in run.stderr
    _write_wav(tmp_path / "8k.wav", pcm16.tobytes(), 2, rate=8000)
    bad = subprocess.run([sys.executable, str(EXAMPLE), "--model", str(saved["plain"]), "--audio",
                          str(tmp_path / "8k.wav")], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "resampling is not implemented" in bad.stderr


def test_errors(saved):
    model = Whisper.from_pretrained(saved["plain"])
    with pytest.raises(ValueError, match=r"log-mel features \(batch, 16, 100\).*model.log_mel"):
        model.encode(Tensor.zeros(1, 16, 3000))
    with pytest.raises(ValueError, match="not multilingual"):
        model.transcribe(_signal(0.5), language="en")
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[0, 31\]"):
        model.transcribe(_signal(0.5), max_new_tokens=40)
    with pytest.raises(RuntimeError, match="set_audio"):
        Whisper.from_pretrained(saved["plain"]).decode(Tensor([[START]]))
    multi = Whisper.from_pretrained(saved["multilingual"])
    with pytest.raises(ValueError, match=r"unknown language 'xx'.*en, de, fr"):
        multi.prompt("xx")
    with pytest.raises(ConfigError, match="model_type 'whisper'"):
        WhisperConfig.from_hf({"model_type": "gpt2"})
    with pytest.raises(ConfigError, match="activation_function 'tanh'"):
        WhisperConfig.from_hf({**json.loads((saved["plain"] / "config.json").read_text()),
                               "activation_function": "tanh"})
