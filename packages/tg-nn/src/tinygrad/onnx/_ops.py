"""Importing this module fills the operator registries of _base.py (each submodule registers its ops)."""

from tinygrad.onnx import _host, _ops_control, _ops_extra, _ops_math, _ops_nn, _ops_tensor

__all__ = ["_host", "_ops_control", "_ops_extra", "_ops_math", "_ops_nn", "_ops_tensor"]
