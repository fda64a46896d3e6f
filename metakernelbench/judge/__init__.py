"""The judge: the service outside the sandbox that holds the GPU, the seeds and each attempt's budget.

An attempt's sandbox has no GPU; its ``submit`` command sends ``/app/kernel.py`` here. The judge
keeps every attempt's budget and every result in an embedded database (``store``), runs one
evaluation per device at a time across all attempts (``queue``), each in a fresh isolated process or
container (``isolation``), and answers with the report the agent reads. Harbor's verifier phase asks
it for the final grade the same way.

The judge sits beside the verifier, not inside it: the verifier is the security boundary (what runs
one grading), the judge the service that runs gradings for many attempts, with an HTTP server, a
sqlite store and Docker or Ray backends that the boundary has no business holding. It imports the
verifier; the verifier never imports it.

Modules that run inside the sandbox (``client``, ``submit``) use only the standard library; nothing
here imports Harbor, so the judge runs where Harbor is not installed (the GPU machine). Harbor's
no-Docker environment, which starts a judge for its trials, is ``metakernelbench.harbor_env``.
"""
