from tinygrad.llm.cli import run

run()
