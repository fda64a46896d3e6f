"""MetaKernelBench's adapter in Harbor's layout: ``adapter.py`` and ``main.py`` over the package's generator."""

__all__ = []
