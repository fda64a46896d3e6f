"""The part of MetaKernelBench that problem files import; the grader is not here."""
