"""Tracy integration: eager sections as zones, timestamped tracks, headless capture, reading captures.

Tracy version: the client embedded in iree-base-runtime 3.13 (Tracy 0.11.2,
protocol 72). See docs/tracy.md.
"""

from sectionmark.lazy import lazy_attributes
from sectionmark.readers.tracy_capture import Capture, Track, Zone, read_capture
from sectionmark.tracy.binding import TracyClient
from sectionmark.tracy.capture import capture_command
from sectionmark.tracy.stats import ZoneStats, zone_stats
from sectionmark.tracy.zones import TracyZones, disable, enable, tracing

# The GPU-timeline track is the Tracy renderer's (sectionmark.renderers.tracy_gpu_timeline), a later stage:
# loaded only when used, so that the runner's headless capture loads no renderer.
__getattr__ = lazy_attributes(
    __name__, globals(), {"GpuTimeline": ("sectionmark.renderers.tracy_gpu_timeline", "GpuTimeline")}
)

__all__ = [
    "enable",
    "tracing",
    "disable",
    "GpuTimeline",
    "TracyClient",
    "TracyZones",
    "capture_command",
    "read_capture",
    "Capture",
    "Track",
    "Zone",
    "zone_stats",
    "ZoneStats",
]
