"""Helpers of the implementation, not part of the public surface.

Importable, but they may change or move without notice; what users and other tools
build on is listed in docs/pages/architecture.md ("Public surface"). They import
nothing of the package but its errors, so every layer may use them.
"""
