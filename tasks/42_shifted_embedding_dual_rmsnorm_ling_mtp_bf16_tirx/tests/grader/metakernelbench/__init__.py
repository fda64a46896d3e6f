"""MetaKernelBench: does a kernel agent's written skill transfer between CuTe DSL and TIRx?

The installed package is ``metakernelbench``; the repository keeps the design's top-level layout
(``verifier/``, ``adapters/``, ``skill_transfer/``) and maps those folders to
``metakernelbench.verifier`` and friends, so no generic top-level name lands in site-packages.
"""

__version__ = "0.1.0"
