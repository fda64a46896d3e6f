"""The part of MetaKernelBench that problem files import, and the `submit` client; the grader is not here."""
