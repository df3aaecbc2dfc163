"""Issue M item 5, on a CPU machine: the two-device GPTs of tests/helpers/parallel_gpt.py (tensor-parallel and
pipeline-parallel, marked as users mark) exported with their sections and compiled for two CUDA devices
(``sm.compile(..., target="cuda", devices=2)``), with their input and eager torch's logits, into OUT/{tp,pp}/
(model.vmfb, model.sections.json, tokens.npy, reference.npy). scripts/gpu_devices/probe.sh runs them on a GPU.

    PYTHONPATH=src:tests/helpers python scripts/gpu_devices/prepare.py .gpu/devices
"""

import argparse
from pathlib import Path

import numpy as np
from parallel_gpt import export_arguments, pipeline_gpt, tensor_parallel_gpt

import sectionmark as sm

BUILDS = {"tp": tensor_parallel_gpt, "pp": pipeline_gpt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for tp/ and pp/")
    options = parser.parse_args()
    for name, build in BUILDS.items():
        folder = options.out / name
        folder.mkdir(parents=True, exist_ok=True)
        model, reference = build()
        args, arg_device = export_arguments()
        exported = sm.torch.export(model, args=args, arg_device=arg_device, quiet=True)
        compiled = sm.compile(exported, target="cuda", devices=2, quiet=True)
        compiled.save(folder / "model.vmfb")
        compiled.section_map.save(folder / "model.sections.json")
        np.save(folder / "tokens.npy", args[0].numpy())
        np.save(folder / "reference.npy", reference(*args).detach().numpy())
        print(f"{name}: {folder}/model.vmfb, {len(compiled.section_map.command_buffers)} command buffers")


if __name__ == "__main__":
    main()
