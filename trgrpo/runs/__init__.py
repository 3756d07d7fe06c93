"""Everything that runs, resumes, plans and records experiments, beneath the method: one run (:mod:`.experiment`,
:mod:`.spec`, :mod:`.checkpoints`, :mod:`.records`), the toy's grids and controls, the real-LM stages, full-scale
launch, the planner, batches of notebooks and the benchmark. It imports the method (trgrpo's top level and
trgrpo.tasks), never :mod:`trgrpo.reports`."""
