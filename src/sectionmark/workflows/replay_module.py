"""The replay module: a tiny IREE module that makes a recorded sequence of calls again.

IREE 3.13's Python bindings cannot profile in-process, and its benchmark tool
calls one function with fixed inputs. A recorded program (prefill, then many
decode steps passing the KV cache along) becomes one function of a second
module that imports the model's functions::

    func.func private @"model.prefill"(!hal.buffer_view, ...) -> (...)
    func.func @replay(%input0: !hal.buffer_view, ...) -> (...) {
      %call0:3 = func.call @"model.prefill"(%input0, ...) ...
      %call1:3 = func.call @"model.decode"(%input1, %call0#1, %call0#2) ...
      return %call1#0, ...
    }

Results flow from call to call as buffer views, so state stays on the device
exactly as in the user's program; host inputs are the function's arguments
(``--input`` of the tool). The replay module has no tensors and no dispatches: it
compiles in well under a second, for any target, and the executables of the
model are untouched. The function returns the last call's results, so an
in-process replay can be compared with the recorded run.
"""

from __future__ import annotations

from typing import NamedTuple, Union

from sectionmark.errors import SectionmarkError, first_line

REPLAY_MODULE = "sectionmark_replay"
REPLAY_FUNCTION = "replay"
_BUFFER_VIEW = "!hal.buffer_view"


# NamedTuples, not dataclasses: a recording makes several per call of the program, and they are 5x cheaper.
class InputArgument(NamedTuple):
    """A host value: the replay function's argument ``index``."""

    index: int


class ResultArgument(NamedTuple):
    """Result ``result`` of the earlier call ``call``."""

    call: int
    result: int


Argument = Union[InputArgument, ResultArgument]


class ReplayCall(NamedTuple):
    """One call of the model's ``function`` with its arguments, giving ``results`` results."""

    function: str
    arguments: tuple[Argument, ...]
    results: int


def replay_module_text(module_name: str, calls: list[ReplayCall], inputs: int) -> str:
    """The replay module's MLIR: imports of the model functions called, then one function making the calls in order."""
    signatures: dict[str, tuple[int, int]] = {}
    for call in calls:
        signature = (len(call.arguments), call.results)
        if signatures.setdefault(call.function, signature) != signature:
            raise SectionmarkError(
                f"function {call.function!r} was called with {signature[0]} arguments giving {signature[1]} results "
                f"and with {signatures[call.function][0]} giving {signatures[call.function][1]}: a replay needs one "
                "signature per function"
            )

    def types(count: int) -> str:
        return ", ".join([_BUFFER_VIEW] * count)

    def symbol(function: str) -> str:
        return '@"' + f"{module_name}.{function}".replace("\\", "\\\\").replace('"', '\\"') + '"'

    def value(argument: Argument) -> str:
        if isinstance(argument, InputArgument):
            return f"%input{argument.index}"
        single = calls[argument.call].results == 1
        return f"%call{argument.call}" if single else f"%call{argument.call}#{argument.result}"

    last = calls[-1]
    returned = [value(ResultArgument(len(calls) - 1, index)) for index in range(last.results)]
    lines = [f"module @{REPLAY_MODULE} {{"]
    for function, (arguments, results) in signatures.items():
        lines.append(f"  func.func private {symbol(function)}({types(arguments)}) -> ({types(results)})")
    parameters = ", ".join(f"%input{index}: {_BUFFER_VIEW}" for index in range(inputs))
    lines.append(f"  func.func @{REPLAY_FUNCTION}({parameters}) -> ({types(last.results)}) {{")
    for index, call in enumerate(calls):
        named = f"%call{index}" if call.results == 1 else f"%call{index}:{call.results}"
        target = f"{'' if not call.results else named + ' = '}func.call {symbol(call.function)}"
        operands = ", ".join(value(argument) for argument in call.arguments)
        lines.append(f"    {target}({operands}) : ({types(len(call.arguments))}) -> ({types(call.results)})")
    lines.append(f"    return {', '.join(returned)}{' : ' + types(last.results) if returned else ''}")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def compile_replay_module(module_name: str, calls: list[ReplayCall], inputs: int) -> bytes:
    """The replay module compiled to a .vmfb (no target flags: it has no device code).

    Users know it as the recording's "replay driver" (docs/record.md), hence the error's wording.
    """
    if not calls:
        raise SectionmarkError("nothing was recorded: call the module's functions inside `with sm.record(module):`")
    from iree.compiler import CompilerToolError, compile_str

    try:
        return bytes(compile_str(replay_module_text(module_name, calls, inputs)))
    except CompilerToolError as error:
        raise SectionmarkError(f"cannot compile the replay driver: {first_line(str(error), 'iree-compile failed')}") from None
