"""The nanoGPT demo that ships with sectionmark: ``sectionmark demo`` (docs/quickstart.md).

`model_torch` is a nanoGPT-style GPT in PyTorch with sections named like the
LLM visualisation (random weights: nothing is downloaded), `model_jax` its
JAX twin with the same section names, `run` the demo itself: export, compile,
profile and every output. The tests and benchmarks build their nanoGPT
models from here too.
"""
