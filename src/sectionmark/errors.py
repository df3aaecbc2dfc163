"""The one exception type the CLI turns into a single error line."""


class SectionmarkError(Exception):
    """A user-facing failure: bad input, missing tool, unsupported format.

    The message is one line that says what is wrong and, where possible, what
    to do; the CLI prints it as ``sectionmark: error: <message>`` and exits 1.
    """


# What iree.runtime raises for a failed IREE status: INVALID_ARGUMENT and most codes are ValueError or RuntimeError,
# OUT_OF_RANGE (a truncated parameter archive) IndexError, UNIMPLEMENTED NotImplementedError.
IREE_ERRORS = (ValueError, RuntimeError, IndexError, NotImplementedError)


def first_line(text: str, default: str = "no message") -> str:
    """The first non-blank line of a library's multi-line error, for a one-line message."""
    return next((line.strip() for line in text.splitlines() if line.strip()), default)
