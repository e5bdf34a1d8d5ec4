"""One Textual widget per module."""
