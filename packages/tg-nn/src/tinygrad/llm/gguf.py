"""`tinygrad.llm.gguf`, where tinygrad keeps its GGUF loader: the reader lives in `tinygrad.nn.gguf` (also
`tinygrad.nn.state.gguf_load`); programs written against tinygrad import it from here."""

from tinygrad.nn.gguf import GGUFError, gguf_load

__all__ = ["GGUFError", "gguf_load"]
