"""The two-device GPTs' figures (issue M): sections reached, numerics against eager torch, the dispatches of one
call on each device (iree-benchmark-module's profile of both, IREE's own export of it), and the acceptance of
their several-device profile: per device, the largest difference between a section's busy time and the sum of
that device's dispatch events in ``iree-profile export`` (`section_oracle`), the coverage error, and whether
compute + transfer + queue + waiting + idle is each call's window.

    PYTHONPATH=src:tests/helpers python scripts/parallel_gpt_figures.py

The same checks, as assertions: tests/importers/test_torch_devices.py.
"""

import tempfile
from pathlib import Path

import numpy as np
from parallel_gpt import export_arguments, pipeline_gpt, tensor_parallel_gpt
from tiny_profiles import export_rows, section_oracle
from two_devices import RUNTIME_DEVICES, dispatches_per_device

import sectionmark as sm
from sectionmark.profiling.devices import DEVICE_TIME_PARTS

ITERATIONS, WARMUP = 5, 1

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
        kept = Path(directory) / "run.ireeprof"
        profile = sm.profile(compiled, [args[0].numpy()], devices=RUNTIME_DEVICES, iterations=ITERATIONS,
                             warmup=WARMUP, keep_profile=kept, quiet=True)
        rows = export_rows(kept)
    section_map = compiled.section_map
    print(f"{build.__name__}: sections {len(section_map.reached)}/{len(section_map.sections)} reached, "
          f"max |compiled - eager| {error:.1e}, dispatches in one call on device 0: {sum(ran[0].values())}, "
          f"on device 1: {sum(ran[1].values())}")
    for device in profile.devices:
        _calls, oracle = section_oracle(rows, section_map, WARMUP, device=device.ordinal, calls=ITERATIONS + WARMUP)
        exclusive = {row.path: row.exclusive_ns for row in device.session.sections}
        worst = max(abs(exclusive.get(path, 0.0) - ns) for path, ns in oracle.items())
        time = device.time
        windows = [sum(parts) for parts in profile.devices[0].time.per_call]
        exact = [sum(parts) for parts in time.per_call] == windows
        parts = ", ".join(f"{part} {getattr(time, f'{part}_ns') / ITERATIONS / 1e3:.1f}" for part in DEVICE_TIME_PARTS)
        print(f"  device {device.ordinal}: {len(oracle)} sections with dispatches, max |busy - export| {worst:.3f} ns, "
              f"coverage error {device.session.coverage_error}, parts = window every call: {exact} "
              f"(µs/call: {parts})")
