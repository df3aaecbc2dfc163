"""The two-device GPTs' figures (issue M, export side): sections reached, numerics against eager torch, and the
dispatches of one call on each device (iree-benchmark-module's profile of both, IREE's own export of it).

    PYTHONPATH=src:tests/helpers python scripts/parallel_gpt_figures.py

The same checks, as assertions: tests/importers/test_torch_devices.py.
"""

import tempfile
from pathlib import Path

import numpy as np
from parallel_gpt import export_arguments, pipeline_gpt, tensor_parallel_gpt
from two_devices import RUNTIME_DEVICES, dispatches_per_device

import sectionmark as sm

for build in (tensor_parallel_gpt, pipeline_gpt):
    model, reference = build()
    args, arg_device = export_arguments()
    compiled = sm.compile(sm.torch.export(model, args=args, arg_device=arg_device, quiet=True), devices=2,
                          quiet=True)
    result = sm.load(compiled, devices=RUNTIME_DEVICES).main(args[0].numpy()).to_host()
    error = np.abs(result - reference(*args).detach().numpy()).max()
    with tempfile.TemporaryDirectory() as directory:
        ran = dispatches_per_device(compiled.save(Path(directory) / "m.vmfb"), [args[0].numpy()], Path(directory),
                                    calls=1)
    section_map = compiled.section_map
    print(f"{build.__name__}: sections {len(section_map.reached)}/{len(section_map.sections)} reached, "
          f"max |compiled - eager| {error:.1e}, dispatches in one call on device 0: {sum(ran[0].values())}, "
          f"on device 1: {sum(ran[1].values())}")
