"""The contract between the dashboard and the worker: messages, codec, config and store schema.

Depends on msgspec and the standard library only.
"""

__version__ = "0.1.0"
