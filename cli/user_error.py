"""The CLI's user-error type, apart from click: the model loader and feed builder use it, and they must
import where click is not installed (the GPU machines' check scripts run them with the runtime's needs only)."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's files or option values; the message says what to change."""
