"""The one exception type the CLI turns into a single error line."""


class SectionmarkError(Exception):
    """A user-facing failure: bad input, missing tool, unsupported format.

    The message is one line that says what is wrong and, where possible, what
    to do; the CLI prints it as ``sectionmark: error: <message>`` and exits 1.
    """


class SectionmarkTypeError(SectionmarkError, TypeError):
    """A public function given a value of a type it does not take: a `TypeError` as Python's own, and a
    `SectionmarkError` (one error line on the command line). The message names the type and what is taken."""


def wrong_type(function: str, value: object, accepted: str) -> SectionmarkTypeError:
    """The error for ``value`` passed to ``function``, which takes ``accepted`` (words: "an export, MLIR text ...");
    the type is named with its module (``torch.Tensor``), a builtin one alone (``int``)."""
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return SectionmarkTypeError(f"{function} takes {accepted}, not {name}")


# What iree.runtime raises for a failed IREE status: INVALID_ARGUMENT and most codes are ValueError or RuntimeError,
# OUT_OF_RANGE (a truncated parameter archive) IndexError, UNIMPLEMENTED NotImplementedError.
IREE_ERRORS = (ValueError, RuntimeError, IndexError, NotImplementedError)


def first_line(text: str, default: str = "no message") -> str:
    """The first non-blank line of a library's multi-line error, for a one-line message."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default)
