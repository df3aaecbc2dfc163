"""Conformance suite: one table of real third-party programs, every one checked by one oracle.

Run: ``.venv/bin/python -m pytest -q -p no:logging tests/conformance`` (about 80 s on 2 cores;
the terminal summary prints what was measured per program).

The table (``programs.PROGRAMS``; tiny configs: hidden 32–64, 2 layers, 8 tokens, seeded
random weights, nothing downloaded):

=======================  =====================================================================
program                  what runs, and how it is marked
=======================  =====================================================================
gpt2                     transformers GPT2LMHeadModel; Embedding (wte + wpe), Layer i /
                         Attention, MLP, Final Norm, LM Head
llama                    LlamaForCausalLM; Embedding, Rotary Embedding, Layer i / Attention,
                         MLP, Final Norm, LM Head (rotary: a ``@torch.no_grad()`` forward)
qwen2-gqa                Qwen2ForCausalLM with grouped-query attention (4 query, 2 kv heads)
bert                     BertForMaskedLM; Embeddings, Layer i / Attention, MLP (intermediate
                         and output: two modules, one section), LM Head
t5                       T5ForConditionalGeneration, encoder and decoder with
                         decoder_input_ids; Encoder / Embedding, Layer i / Self Attention,
                         MLP, Final Norm; Decoder / ... Cross Attention ...; LM Head
vit                      ViTForImageClassification; Patch Embedding, Layer i / Attention,
                         MLP, Final Norm, Head
resnet-batchnorm         tests/end_to_end/test_real_models.py ResNetStyle: Block i / Conv, BatchNorm
                         (inference), ReLU; Residual; Head
torch-training-step      ``sm.torch.export_training_step`` of a residual MLP classifier
                         (cross-entropy loss in no section): forward + every gradient
flax-linen-scan-remat    Flax linen: Embed, Layers (``nn.scan`` over ``nn.remat``) /
                         Attention, MLP; Head
flax-training-step       value_and_grad of that model + an SGD update (both in no section)
flax-nnx-scan            Flax NNX: layers made by ``nnx.vmap``, run by ``nnx.scan``;
                         ``nnx.split`` / ``nnx.merge`` around a pure function
tensor-parallel-gpt      the demo GPT split over two local-task devices (tests/helpers/parallel_gpt.py:
                         heads and MLP halves, ``DeviceAffinity`` + ``transfer_to_logical_device``);
                         Embedding, Block i / Layer Norm, Self Attention / QKV, Attention Softmax,
                         Projection, MLP; Layer Norm, LM Head
=======================  =====================================================================

A program of several devices (``Program.devices``) is compiled with ``sm.compile(devices=N)``, run
with ``sm.load(devices=...)`` and profiled with ``sm.profile(devices=...)``; the same checks hold on
each device's session (coverage, unmarked time summed over the devices), and its plain pipeline is
compiled with the same device flags.

Hugging Face models are marked from outside (``recorder.mark_by_spec``: a marking spec per
model); each model is wrapped so that its forward returns one tensor.

The oracle (``test_conformance.check_program``), for every program:

1. **sections** — the section paths expected are recorded by running the program (a stack of
   the marks entered: ``recorder``), not read back by sectionmark; they must equal both
   ``exported.sections`` and ``compiled.section_map.sections``. Training steps: every forward
   path again with " (backward)" on each name (every section here has parameters, so all have
   backward ops), and for ``nn.remat`` layers their forward recomputed as
   ("Layers (backward)", "<child> (recompute)").
2. **unmarked** — the unmarked FLOP share counted here on the *input* program (``input_flops``:
   ``iree.compiler`` to phase ``input``, linalg on tensors before fusion, FLOPs counted by
   this suite's own rules) equals the map's (unmarked-share FLOPs over all share FLOPs, over
   the dispatch commands ``main`` records) within 0.001 + 5% of the larger share; none in the
   input means none in the map. **unmarked-time** — the profile agrees both ways: no unmarked
   FLOPs in the input => ``unmarked_ns == 0``; more than 1% => ``unmarked_ns > 0``.
3. **numerics** — the compiled function's outputs equal eager torch (``no_grad``) or
   ``jax.jit(fn)`` (rtol 1e-4, atol 1e-5, as tests/end_to_end/test_real_models.py).
4. **executables** — byte-identical to the plain pipeline's (tests/compiler/test_byte_identity.py):
   ``aot.export`` without sectionmark's names for torch, ``jax.jit(fn).lower(...)`` for JAX, both
   compiled by ``iree.compiler`` alone. torch.fx numbers the generated code of a re-traced graph
   per process (``<eval_with_key>.N``, embedded in executables): the plain text gets the
   export's numbers. The torch training step has no plain iree-turbine pipeline; its plain side
   is the exported program with sectionmark's names stripped.
5. **coverage** — ``tests/invariants.assert_profile_invariants`` (sections + unmarked = all
   time, busy and wall; wall <= busy; parents hold children) and ``coverage_error <= 1e-6``.

Checks that fail because sectionmark (or what it reads) is wrong are listed in
``test_conformance.KNOWN_BUGS`` as strict xfails, each with its reason.
"""
