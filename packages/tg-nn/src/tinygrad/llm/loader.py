"""Loading what `python -m tinygrad.llm --model PATH` serves: a Hugging Face directory (GPT-2, or by config.json's
model_type LLaMA, Qwen2, Qwen3 and the mixtures of experts Mixtral, Qwen3-MoE and OLMoE) with its tokenizer.json and
chat template, or a llama.cpp .gguf file with the vocabulary and chat template from its metadata."""

from __future__ import annotations

import json
import mmap
import pathlib
from collections.abc import Mapping
from typing import Any, cast

from tinygrad.llm.engine import Engine

__all__ = ["gguf_metadata", "hf_chat_template", "load_engine"]

# the model_types tinygrad.nn.transformer.Llama loads (its LLAMA_MODEL_TYPES)
LLAMA_TYPES = ("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe", "olmoe")


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    return data if isinstance(data, dict) else {}


def _pick_template(value: Any) -> str | None:
    """tokenizer_config.json's chat_template: a string, or a list of named templates (take "default")."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, Mapping)}
        chosen = named.get("default")
        return chosen if isinstance(chosen, str) else None
    return None


def hf_chat_template(directory: pathlib.Path, config: Mapping[str, Any]) -> str | None:
    """The chat template of a Hugging Face directory: tokenizer_config.json's, else the separate
    chat_template.jinja (where transformers 4.43+ saves it), else chat_template.json's."""
    template = _pick_template(config.get("chat_template"))
    if template is None and (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    if template is None:
        template = _pick_template(_read_json(directory / "chat_template.json").get("chat_template"))
    return template


def _id_list(value: Any) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def gguf_metadata(path: str | pathlib.Path) -> dict[str, Any]:
    """The metadata of a GGUF file without reading its tensors: the file is mapped, so only the pages the header
    and metadata occupy are read."""
    from tinygrad.nn import gguf

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        # the parser takes bytes; an mmap offers the same slicing and length, and is what keeps this cheap
        meta, _, _ = gguf._parse(cast(bytes, mm), str(path))
    return meta


def _tokenizer_file(path: str | pathlib.Path) -> Any:
    from tinygrad.nn.transformer import load_tokenizer

    tok = load_tokenizer(path)
    if tok is None:
        raise FileNotFoundError(f"no tokenizer.json at {path}")
    return tok


def load_engine(path: str | pathlib.Path, max_context: int | None = None, tokenizer: str | pathlib.Path | None = None,
                name: str | None = None) -> Engine:
    """An Engine for a model directory or .gguf file. tokenizer: a tokenizer.json (or a directory holding one) to
    use instead of the model's own vocabulary. name: the model id the API answers to (default: the directory's
    or file's name)."""
    from tinygrad.nn.transformer import GPT2, ConfigError, Llama, load_tokenizer

    p = pathlib.Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: give a Hugging Face model directory or a .gguf file")
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ValueError(f"{p} is a file but not a .gguf file; a Hugging Face model is given as its directory")
        from tinygrad.llm.gguf_vocab import special_tokens_from_gguf, stop_ids_from_gguf, tokenizer_from_gguf

        meta = gguf_metadata(p)
        # the vocabulary first: a file without one should fail before its weights are loaded
        if tokenizer is not None:
            tok = _tokenizer_file(tokenizer)
        elif "tokenizer.ggml.tokens" in meta:
            tok = tokenizer_from_gguf(meta)
        else:
            tok = load_tokenizer(p.parent)
            if tok is None:
                raise FileNotFoundError(f"{p} has no vocabulary and there is no tokenizer.json beside it; pass one "
                                        f"with --tokenizer")
        template = meta.get("tokenizer.chat_template")
        # block-quantized weights stay as their blocks (llm/quant.py): memory about the file's size
        from tinygrad.llm.quant import llama_from_gguf

        model: Any = llama_from_gguf(p, max_context=max_context)
        return Engine(model, tok, name or p.stem, template if isinstance(template, str) else None,
                      special_tokens_from_gguf(meta), stop_ids_from_gguf(meta))
    config = _read_json(p / "config.json")
    if not config:
        raise FileNotFoundError(f"{p} has no config.json: give a Hugging Face model directory or a .gguf file")
    kind = config.get("model_type")
    tok = _tokenizer_file(tokenizer) if tokenizer is not None else load_tokenizer(p)
    if tok is None:
        raise FileNotFoundError(f"{p} has no tokenizer.json; pass one with --tokenizer")
    if kind == "gpt2":
        model = GPT2.from_pretrained(p, max_context=max_context)
    elif kind in LLAMA_TYPES:
        model = Llama.from_pretrained(p, max_context=max_context)
    else:
        raise ConfigError(f"{p}: model_type {kind!r} is not supported (supported: gpt2, {', '.join(LLAMA_TYPES)})")
    tok_config = _read_json(p / "tokenizer_config.json")
    # chat models often end a turn with an id config.json does not list (LLaMA 3's <|eot_id|>):
    # generation_config.json names every id that ends an answer
    stop_ids = _id_list(_read_json(p / "generation_config.json").get("eos_token_id"))
    specials = {k: v for k, v in tok_config.items() if k.endswith("_token")}
    return Engine(model, tok, name or p.resolve().name, hf_chat_template(p, tok_config), specials, stop_ids)
