"""`tinygrad.llm.gguf`, where tinygrad keeps its GGUF loader: the reader lives in `tinygrad.nn.gguf` (also
`tinygrad.nn.state.gguf_load`); programs written against tinygrad import it from here. `gguf_load_quantized` keeps
block-quantized tensors as their bytes (`QuantizedTensor`); `tinygrad.llm.quant` builds models on them."""

from tinygrad.nn.gguf import GGUFError, QuantizedTensor, gguf_load, gguf_load_quantized

__all__ = ["GGUFError", "QuantizedTensor", "gguf_load", "gguf_load_quantized"]
