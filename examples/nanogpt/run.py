"""nanoGPT end to end: export -> compile -> profile -> table, traces and chart (``sectionmark demo``).

The demo and its models ship in the package (sectionmark.demo); this script runs it from a source tree.

examples:
  python examples/nanogpt/run.py                          # small GPT, torch, results in out/
  python examples/nanogpt/run.py --config gpt2-small      # 12 layers, 768 wide
  python examples/nanogpt/run.py --framework jax --out out-jax
  python examples/nanogpt/run.py --device vulkan --out out-vk   # compiled for vulkan-spirv (docs/gpu.md)
"""

import sys

from sectionmark.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
