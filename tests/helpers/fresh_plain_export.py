"""Run by test_real_models in a fresh interpreter: the user's own iree-turbine export, no sectionmark scope.

First the pipeline-parallel demo GPT placed on two devices (``arg_device``,
``transfer_to_logical_device``: the first export of the process, so the hooks
that let turbine expand its transfers install themselves on its first section),
compiled for two CPU devices; then marked tiny GPT-2 (``aot.export`` of an nn.Module), Llama prefill + decode
(``FxProgramsBuilder``, whose no_grad rotary embedding torch re-traces) and
GPT-2 as a ``torch.export.ExportedProgram``, each compiled with ``sm.compile``.
Prints one JSON line: per program, the sections of the map and, for the
nn.Module and the two-device GPT, the executables of the unmarked plain pipeline for comparison
(the .vmfb pairs written to the directory argv[1]); argv[2]: the prompt length.
"""

import json
import sys
from pathlib import Path

import iree.compiler

import torch
from iree.turbine import aot

import sectionmark as sm
from hf_models import MAX_LEN, CachedLM, Logits, empty_cache, tiny_gpt2, tiny_llama
from parallel_gpt import export_arguments, pipeline_gpt
from two_devices import TWO_CPU_DEVICES
from sectionmark.compiler.targets import target_flags
from sectionmark.locations import strip_sectionmark_names

out = Path(sys.argv[1])
ids = torch.randint(0, 256, (1, MAX_LEN), generator=torch.Generator().manual_seed(1))
results = {}

tokens, arg_device = export_arguments()
output = aot.export(pipeline_gpt()[0], args=tokens, arg_device=arg_device)
compiled = sm.compile(output, devices=2)
results["several devices"] = [list(path) for path in compiled.section_map.sections]
(out / "devices_ours.vmfb").write_bytes(compiled.vmfb)
(out / "devices_plain.vmfb").write_bytes(iree.compiler.compile_str(
    strip_sectionmark_names(output.mlir_module.get_asm(enable_debug_info=True)),
    extra_args=[*TWO_CPU_DEVICES, "--iree-input-type=torch"]))

output = aot.export(Logits(tiny_gpt2()), args=(ids,))
compiled = sm.compile(output)
results["nn.Module"] = [list(path) for path in compiled.section_map.sections]

plain_text = strip_sectionmark_names(output.mlir_module.get_asm(enable_debug_info=True))
(out / "ours.vmfb").write_bytes(compiled.vmfb)
(out / "plain.vmfb").write_bytes(iree.compiler.compile_str(
    plain_text, extra_args=[*target_flags("llvm-cpu"), "--iree-input-type=torch"]))

model = tiny_llama()
keys, values = empty_cache(model)
builder = aot.FxProgramsBuilder(CachedLM(model))
prompt = int(sys.argv[2])


@builder.export_program(name="prefill", args=(ids[:, :prompt], torch.arange(prompt), keys, values))
def prefill(module, input_ids, positions, keys, values):
    return module(input_ids, positions, keys, values)


@builder.export_program(name="decode", args=(ids[:, :1], torch.tensor([prompt]), keys, values))
def decode(module, input_ids, positions, keys, values):
    return module(input_ids, positions, keys, values)


results["FxProgramsBuilder"] = [list(path) for path in sm.compile(aot.export(builder)).section_map.sections]
program = torch.export.export(Logits(tiny_gpt2()), (ids,))
results["ExportedProgram"] = [list(path) for path in sm.compile(aot.export(program)).section_map.sections]
print(json.dumps(results))
