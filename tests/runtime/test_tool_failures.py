"""Failed, crashed and hung tools: one line with the real cause, never a hang."""

import numpy as np
import pytest

from sectionmark.compiler import compile
from sectionmark.errors import SectionmarkError
from sectionmark.workflows.measure import profile
from sectionmark.workflows.runner import tool_failure
from sectionmark.artifacts.tools import exit_description, last_useful_line

ASLR = "***WARNING*** ASLR is enabled, the results may have unreproducible noise in them."
MLIR = """
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {
  %s = math.sin %x : tensor<64xf32> loc("sectionmark:A"("t.py":1:0))
  return %s : tensor<64xf32>
}
"""


def test_a_crashed_tool_reports_its_signal_not_the_aslr_warning():
    assert tool_failure("local-task", ASLR + "\n", -11) == "iree-benchmark-module crashed with SIGSEGV on local-task: no error message"
    stderr = f"{ASLR}\nloading module\niree/runtime/x.c:12: INTERNAL; out of luck\nbenchmark done\n"
    assert tool_failure("local-task", stderr, 1) == "iree-benchmark-module failed on local-task: iree/runtime/x.c:12: INTERNAL; out of luck"
    assert tool_failure("local-task", "abort called\n", 134).startswith("iree-benchmark-module crashed with SIGABRT")


BANNER = """2026-11-26T02:41:46+00:00
Running /venv/lib/python3.11/site-packages/iree/_runtime_libs/iree-benchmark-module
Run on (2 X 2596.1 MHz CPU s)
CPU Caches:
  L1 Data 48 KiB (x2)
  L1 Instruction 32 KiB (x2)
  L2 Unified 1024 KiB (x2)
  L3 Unified 32768 KiB (x1)
Load Average: 1.99, 5.35, 4.36
***WARNING*** CPU scaling is enabled, the benchmark real time measurements may be noisy.
***WARNING*** ASLR is enabled, the results may have unreproducible noise in them.
---------------------------------------------------------------------
Benchmark                               Time             CPU   Iterations
---------------------------------------------------------------------
"""


def test_a_crash_after_the_benchmark_banner_does_not_quote_the_banner():
    assert tool_failure("local-task", BANNER, -11) == "iree-benchmark-module crashed with SIGSEGV on local-task: no error message"
    assert tool_failure("local-task", BANNER + "iree/vm/x.c:3: NOT_FOUND; no function\n", 1).endswith("NOT_FOUND; no function")


def test_a_tool_printing_bytes_that_are_not_utf8_is_one_line(compiled, tmp_path, monkeypatch):
    """A mutated module's names reach the tool's error message as they are: any bytes."""
    import sectionmark.workflows.runner as runner

    tool = tmp_path / "iree-benchmark-module"
    tool.write_bytes(b"#!/bin/sh\nprintf 'INVALID_ARGUMENT; function \\377\\376main not found\\n' >&2\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setattr(runner, "find_tool", lambda name, tracing=False: tool)
    with pytest.raises(SectionmarkError, match="^iree-benchmark-module failed on local-task: INVALID_ARGUMENT; "
                                               "function \ufffd\ufffdmain not found$"):
        profile(compiled, (np.zeros(64, np.float32),), iterations=1, warmup=0, quiet=True)


# What iree-benchmark-module prints when a Vulkan queue fails (lavapipe, a mutated module): IREE's status line,
# then the VM's stack frames, innermost last.
VULKAN_FAILURE = """iree/hal/drivers/vulkan/native_semaphore.cc:168: UNKNOWN; VkResult=4294967283 (VK_ERROR_UNKNOWN); \
while invoking native function hal.fence.await; while calling import;
[ 1]   native hal.fence.await:0 -
[ 0] bytecode jit_f@2:1258 -
"""
IREE_STATUS_CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                     "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                     "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED", "DEFERRED",
                     "INCOMPATIBLE"]  # iree/base/status.h, iree_status_code_string


def test_a_vulkan_failure_quotes_iree_status_line_not_a_vm_stack_frame():
    assert tool_failure("vulkan", BANNER + VULKAN_FAILURE, 1) == (
        "iree-benchmark-module failed on vulkan: iree/hal/drivers/vulkan/native_semaphore.cc:168: UNKNOWN; "
        "VkResult=4294967283 (VK_ERROR_UNKNOWN); while invoking native function hal.fence.await; while calling import;")


@pytest.mark.parametrize("code", IREE_STATUS_CODES)
def test_every_iree_status_code_marks_the_error_line(code):
    status = f"iree/runtime/x.c:7: {code}; what went wrong"
    assert last_useful_line(f"{ASLR}\n{status}\n[ 0] bytecode module.main@0:42 -\n") == status
    if "FAILED" not in code:  # a tool's own word, anywhere in a line
        assert last_useful_line(f"{status}\nGOODBYE_{code}S and NOT{code}\n") == status  # codes: whole words only


def test_last_useful_line_and_exit_description():
    assert last_useful_line(f"{ASLR}\n\n") == "no error message"
    assert last_useful_line(f"{ASLR}\nlast words\n", "-") == "last words"
    assert exit_description(-9) == "crashed with SIGKILL" and exit_description(139) == "crashed with SIGSEGV"
    assert exit_description(1) == "exited with status 1" and exit_description(2) == "exited with status 2"


@pytest.fixture(scope="module")
def compiled():
    return compile(MLIR, input_type=None)


def test_local_sync_is_refused_up_front_with_the_reason(compiled):
    with pytest.raises(SectionmarkError, match="local-sync cannot be profiled with IREE 3.13.*SIGSEGV"):
        profile(compiled, (np.zeros(64, np.float32),), device="local-sync", iterations=1, warmup=0, quiet=True)


def test_a_tool_that_runs_too_long_is_ended_with_one_line(compiled):
    with pytest.raises(SectionmarkError, match="did not finish within 0.5 s on local-task and was ended"):
        profile(compiled, (np.zeros(64, np.float32),), iterations=1_000_000, warmup=0, quiet=True, timeout=0.5)


def test_a_bad_compiler_flag_is_named():
    with pytest.raises(SectionmarkError, match="bad compiler flag: Error parsing flags: option not found: bogus-flag"):
        compile(MLIR, input_type=None, extra_args=["--bogus-flag"])


def test_a_bad_flag_value_is_one_line_with_the_parsers_reason(tmp_path):
    """LLVM's option parser prints why on stderr itself: the CLI folds it into its one error line."""
    import subprocess
    import sys

    source = tmp_path / "m.mlir"
    source.write_text(MLIR)
    run = subprocess.run([sys.executable, "-m", "sectionmark", "compile", str(source), "-o", str(tmp_path / "m.vmfb"),
                          "--iree-arg=--iree-opt-level=O9"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [run.stderr.strip()] and "'O9' value not a valid optimization level" in run.stderr
