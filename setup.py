"""Build hook: compile csrc/ into mrcnic._mrcfast with cffi (API, out-of-line mode)."""

from setuptools import setup

setup(cffi_modules=["csrc/build_mrcfast.py:ffibuilder"])
