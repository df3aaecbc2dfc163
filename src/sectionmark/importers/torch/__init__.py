"""PyTorch: sections into FX node metadata, then into MLIR locations (``sm.torch``).

One module per job:

* `scope`: what a section puts in torch's node meta while torch.export traces
  (a path of ``sectionmark#<n>`` keys), and reading a node's path back;
* `hooks`: the registration with the markers' framework registry, and the
  patches of torch, iree-turbine and IREE internals that turn node meta into
  MLIR locations, each with the reason it exists;
* `retrace`: sections carried through torch's re-traces (no_grad regions,
  the joint forward+backward graph), found from each op's stack trace;
* `exporting`: the public API, `export`, `export_training_step` and the
  `sections` scope.

Importing this package registers torch's scope with the markers
(`sectionmark.markers.frameworks` imports it on the first section torch
traces); it imports neither iree-turbine nor the compiler until an export
or the first traced section needs them.
"""

from sectionmark.importers.torch.exporting import export, export_training_step, sections
from sectionmark.importers.torch.hooks import register_with_markers
from sectionmark.importers.torch.scope import node_section_path

__all__ = ["export", "export_training_step", "sections", "node_section_path"]

register_with_markers()
