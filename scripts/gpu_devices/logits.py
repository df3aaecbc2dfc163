"""The two-device GPTs' logits against eager torch's (reference.npy from prepare.py), for probe.sh and profile.sh.

    python logits.py compare OUTPUT.npy REFERENCE.npy   # what iree-run-module wrote
    python logits.py in-process FOLDER DEVICE           # FOLDER/model.vmfb loaded on two DEVICE devices (sm.load)

Exits 1 when the largest difference exceeds 1e-3 (float32 against eager: 7e-7 seen on an H200).
"""

import argparse
import sys

import numpy as np

TOLERANCE = 1e-3


def largest_error(logits: np.ndarray, reference: np.ndarray) -> float:
    if logits.shape != reference.shape:
        raise SystemExit(f"logits {logits.shape} against eager {reference.shape}: shapes differ")
    return float(np.abs(logits - reference).max())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    compare = commands.add_parser("compare")
    compare.add_argument("output")
    compare.add_argument("reference")
    in_process = commands.add_parser("in-process")
    in_process.add_argument("folder")
    in_process.add_argument("device")
    options = parser.parse_args(argv)
    if options.command == "compare":
        logits, reference = np.load(options.output), np.load(options.reference)
        where = "iree-run-module"
    else:
        import sectionmark as sm

        module = sm.load(f"{options.folder}/model.vmfb", devices=[options.device] * 2)
        logits = np.asarray(module.main(np.load(f"{options.folder}/tokens.npy")).to_host())
        reference = np.load(f"{options.folder}/reference.npy")
        where = f"in-process on two {options.device} devices"
    error = largest_error(logits, reference)
    print(f"{where}: logits {logits.shape}, max abs error against eager {error:.3g}")
    return 0 if error < TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
