"""A Hugging Face `tokenizers.Tokenizer` rebuilt from the vocabulary a llama.cpp GGUF file carries in its metadata
(`tokenizer.ggml.*`), so a .gguf file serves text on its own.

Covered:
- `tokenizer.ggml.model = "gpt2"`: byte-level BPE (LLaMA 3, Qwen2, GPT-2 style vocabularies) from `tokens` and
  `merges`. The split before BPE follows `tokenizer.ggml.pre`: "llama-bpe"/"llama3"/"llama-v3"/"falcon3"/"pixtral"
  use LLaMA 3's pattern, "qwen2"/"deepseek-r1-qwen"/"megrez" Qwen2's (with NFC), "gpt-2" and everything else
  GPT-2's (with a warning for names this module does not know: their own pattern may split differently).
- `tokenizer.ggml.model = "llama"`: SentencePiece vocabularies (LLaMA 2, Mistral, TinyLlama). llama.cpp tokenizes
  these by merging adjacent pieces, highest `scores` first, with `<0xXX>` byte pieces for characters not in the
  vocabulary; the same is a BPE whose merges are every split of a piece into two pieces, ranked by the piece's
  score (the conversion transformers applies to SentencePiece BPE models), with byte fallback, "▁" for spaces and
  one prepended to the text and after each special token (`tokenizer.ggml.add_space_prefix`, default true).
  Unigram SentencePiece models (scores are log probabilities, tokenized by a Viterbi search) also come out as this
  BPE, as llama.cpp runs them: usually the same pieces, not always the ones SentencePiece would pick.
Not covered ("bert" WordPiece, "t5" Unigram with its charsmap, "rwkv", "no_vocab"): pass a tokenizer.json.

Token types (`tokenizer.ggml.token_type`): CONTROL pieces become special tokens (matched in the text, dropped when
decoding with skip_special_tokens), USER_DEFINED ones added tokens; `add_bos_token`/`add_eos_token` become the
post-processor that encode(..., add_special_tokens=True) applies.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["GGUFVocabError", "special_tokens_from_gguf", "stop_ids_from_gguf", "tokenizer_from_gguf"]

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PRE = ("llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral")
QWEN2_PRE = ("qwen2", "deepseek-r1-qwen", "megrez")
GPT2_PRE = ("gpt-2", "gpt2", "default", "phi-2", "roberta-bpe", "jina-es", "jina-de")
SPACE = "\u2581"  # SentencePiece's "▁", which stands for a space inside pieces


class GGUFVocabError(ValueError):
    """A GGUF vocabulary that is missing, damaged, or of a kind this module cannot rebuild."""


def tokenizer_from_gguf(meta: Mapping[str, Any]) -> Any:
    """The `tokenizers.Tokenizer` of a GGUF file's metadata (as tinygrad.nn.gguf reads it)."""
    try:
        import tokenizers
    except ImportError as e:
        raise ImportError("the vocabulary of a GGUF file needs the `tokenizers` package: pip install tokenizers") from e
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if kind is None or not isinstance(tokens, list) or not tokens:
        raise GGUFVocabError("the GGUF file has no vocabulary (tokenizer.ggml.model / tokenizer.ggml.tokens)")
    tokens = _clean_tokens(tokens)
    types = list(meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise GGUFVocabError(f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    if kind == "gpt2":
        tok = _byte_level_bpe(tokenizers, meta, tokens)
    elif kind == "llama":
        tok = _sentencepiece_bpe(tokenizers, meta, tokens, types)
    else:
        raise GGUFVocabError(f"GGUF vocabularies of tokenizer.ggml.model {kind!r} are not supported (supported: "
                             f"'gpt2' byte-level BPE, 'llama' SentencePiece); pass a tokenizer.json instead")
    _add_special(tokenizers, tok, tokens, types)
    _post_processor(tokenizers, tok, meta, tokens, default_bos=kind == "llama")
    return tok


def _clean_tokens(tokens: Sequence[Any]) -> list[str]:
    """Tokens as strings the Rust tokenizer accepts: the GGUF reader keeps undecodable bytes as surrogate escapes,
    which are not valid UTF-8; such a token (never a real piece of text) gets a placeholder of its own."""
    out = []
    for i, t in enumerate(tokens):
        s = str(t)
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = f"<gguf-invalid-token-{i}>"
        out.append(s)
    return out


def _vocab(tokens: Sequence[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)  # a duplicate keeps its first id, as llama.cpp's token-to-id map does
    return vocab


def _byte_level_bpe(tokenizers: Any, meta: Mapping[str, Any], tokens: list[str]) -> Any:
    merges_raw = meta.get("tokenizer.ggml.merges")
    if not isinstance(merges_raw, list):
        raise GGUFVocabError("a 'gpt2' GGUF vocabulary needs tokenizer.ggml.merges")
    merges = []
    for m in merges_raw:
        parts = str(m).split(" ", 1)
        if len(parts) != 2:
            raise GGUFVocabError(f"tokenizer.ggml.merges holds {m!r}, not two pieces separated by a space")
        merges.append((parts[0], parts[1]))
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    vocab = _vocab(tokens)
    known = set(vocab)
    merges = [m for m in merges if m[0] in known and m[1] in known and m[0] + m[1] in known]
    pt, norm = tokenizers.pre_tokenizers, tokenizers.normalizers
    byte_level = pt.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    if pre in LLAMA3_PRE or pre in QWEN2_PRE:
        pattern = LLAMA3_PATTERN if pre in LLAMA3_PRE else QWEN2_PATTERN
        # LLaMA 3 matches whole words against the vocabulary before merging (its tokenizer.json's ignore_merges)
        tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges, ignore_merges=pre in LLAMA3_PRE))
        tok.pre_tokenizer = pt.Sequence([pt.Split(tokenizers.Regex(pattern), behavior="isolated"), byte_level])
        if pre in QWEN2_PRE:
            tok.normalizer = norm.NFC()
    else:
        if pre not in GPT2_PRE:
            warnings.warn(f"GGUF vocabulary: pre-tokenizer {pre!r} is not known here; splitting words with GPT-2's "
                          f"pattern, which may tokenize some text differently than the model was trained on",
                          stacklevel=3)
        tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges))
        tok.pre_tokenizer = pt.Sequence([pt.Split(tokenizers.Regex(GPT2_PATTERN), behavior="isolated"), byte_level])
    tok.decoder = tokenizers.decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(tokenizers: Any, meta: Mapping[str, Any], tokens: list[str], types: list[int]) -> Any:
    scores = list(meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens))
    if len(scores) != len(tokens):
        raise GGUFVocabError(f"tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    vocab = _vocab(tokens)
    unk_id = int(meta.get("tokenizer.ggml.unknown_token_id", 0))
    if not 0 <= unk_id < len(tokens):
        raise GGUFVocabError(f"tokenizer.ggml.unknown_token_id {unk_id} is outside the vocabulary")
    # pieces that take part in merging: ordinary and user-defined ones; control, byte and unused pieces never
    # come out of a merge
    mergeable = {t: i for t, i in vocab.items() if types[i] in (NORMAL, USER_DEFINED)}
    candidates = []
    for piece, i in mergeable.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in mergeable and right in mergeable:
                candidates.append((-float(scores[i]), i, mergeable[left], mergeable[right], left, right))
    candidates.sort()  # highest score first; ties by the merged piece's id, then the parts' ids
    merges = [(c[4], c[5]) for c in candidates]
    add_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges, unk_token=tokens[unk_id], fuse_unk=True,
                                                     byte_fallback=True))
    # spaces become "▁", and one is put before the text and after each special token, as llama.cpp does (and
    # transformers' legacy LLaMA tokenizer)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(
        replacement=SPACE, prepend_scheme="always" if add_prefix else "never", split=False)
    dec = tokenizers.decoders
    steps = [dec.Replace(SPACE, " "), dec.ByteFallback(), dec.Fuse()]
    if add_prefix:
        steps.append(dec.Strip(" ", 1, 0))  # the prepended space is not part of the text
    tok.decoder = dec.Sequence(steps)
    return tok


def _add_special(tokenizers: Any, tok: Any, tokens: list[str], types: list[int]) -> None:
    """Control pieces as special tokens and user-defined ones as added tokens; each already has its id in the
    vocabulary, which adding keeps."""
    added = tokenizers.AddedToken
    special = [added(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == CONTROL]
    user = [added(t, special=False, normalized=False) for t, ty in zip(tokens, types) if ty == USER_DEFINED]
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


def _post_processor(tokenizers: Any, tok: Any, meta: Mapping[str, Any], tokens: list[str], default_bos: bool) -> None:
    def special(key: str) -> tuple[str, int] | None:
        i = meta.get(key)
        return (tokens[int(i)], int(i)) if isinstance(i, int) and 0 <= i < len(tokens) else None

    bos, eos = special("tokenizer.ggml.bos_token_id"), special("tokenizer.ggml.eos_token_id")
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", default_bos)) and bos is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and eos is not None
    if not (add_bos or add_eos):
        return
    single = ([bos[0]] if add_bos and bos else []) + ["$A"] + ([eos[0]] if add_eos and eos else [])
    pair = single + ["$B:1"]
    used = [t for t, flag in ((bos, add_bos), (eos, add_eos)) if flag and t is not None]
    tok.post_processor = tokenizers.processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair),
                                                                  special_tokens=list(dict.fromkeys(used)))


def special_tokens_from_gguf(meta: Mapping[str, Any]) -> dict[str, str]:
    """bos_token / eos_token / unk_token / pad_token as text, for chat templates."""
    tokens = meta.get("tokenizer.ggml.tokens") or []
    out = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
                      ("pad_token", "padding_token_id")):
        i = meta.get(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and 0 <= i < len(tokens):
            out[name] = str(tokens[i])
    return out


def stop_ids_from_gguf(meta: Mapping[str, Any]) -> list[int]:
    """The ids that end an answer: end of text, and the end-of-turn/end-of-message ids newer files name."""
    n = len(meta.get("tokenizer.ggml.tokens") or [])
    ids = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    return [i for i in ids if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n]
