"""The demonstration study: a scripted stand-in for a model and the driver of a miniature four-arm run.

Nothing here is part of the installed package: it exists so that the whole pipeline (Harbor's
Terminus-2 agent, the sandbox, the judge, ``mkb collect``/``compare``/``report``) can run end to end
on a machine with no model provider and no GPU. Its numbers demonstrate the plumbing; they measure
nothing about any model.
"""
