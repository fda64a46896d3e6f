"""The grading contract and its enforcement (design.md §4): the project's security boundary.

The trusted side (``grader``) holds the problem, the seeds and the expected outputs; the candidate
runs in a separate process (``worker``) that receives inputs one call at a time and returns raw
outputs and timings, which the trusted side validates.
"""
