"""The judge: the service outside the sandbox that holds the GPU, the seeds and each attempt's budget.

An attempt's sandbox has no GPU; its ``submit`` command sends ``/app/kernel.py`` here. The judge
keeps every attempt's budget and every result in an embedded database (``store``), runs one
evaluation per device at a time across all attempts (``queue``), each in a fresh isolated process or
container (``isolation``), and answers with the report the agent reads. Harbor's verifier phase asks
it for the final grade the same way.

Modules that run inside the sandbox (``client``, ``submit``) use only the standard library; nothing
here imports Harbor, so the judge runs where Harbor is not installed (the GPU machine).
"""
