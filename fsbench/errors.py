"""The one exception type the CLI turns into a one-line message and exit code 2."""


class FsbenchError(Exception):
    """Bad input or missing resources the user can fix; the message says what to do next."""
