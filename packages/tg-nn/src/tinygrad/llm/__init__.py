"""Serving language models: an OpenAI-compatible HTTP API with a chat page, and a terminal chat.

    python -m tinygrad.llm --model path/to/Llama-3.2-1B-Instruct          # http://127.0.0.1:8000/ (page), /v1 (API)
    python -m tinygrad.llm --model model.Q8_0.gguf --chat                  # chat in the terminal

From Python (a tinygrad.nn.transformer model and a tokenizers.Tokenizer):

    from tinygrad.llm import serve
    server = serve(model, tokenizer, port=0, chat_template=template)   # port 0: a free one
    client = openai.OpenAI(base_url=server.url + "v1", api_key="none")
    ...
    server.stop()

`Engine` (engine.py) is the model with its tokenizer and chat template, generating text one request at a time;
server.py speaks HTTP; request_body.py reads a request's JSON body and checks its fields; tool_calls.py reads tool
calls and reasoning back out of generated text; loader.py reads a model directory or .gguf file; gguf_vocab.py
rebuilds a GGUF file's vocabulary as a tokenizers.Tokenizer; cli.py is the command line (also --benchmark) and the
terminal chat.
"""

from tinygrad.llm.engine import ChatTemplateError, Engine, Piece
from tinygrad.llm.loader import load_engine
from tinygrad.llm.server import ApiError, LLMServer, serve

__all__ = ["ApiError", "ChatTemplateError", "Engine", "LLMServer", "Piece", "load_engine", "serve"]
