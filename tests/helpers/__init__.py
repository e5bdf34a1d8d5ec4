"""Helpers shared by tests: harnesses, fakes and tiny models. Never a test module itself."""
