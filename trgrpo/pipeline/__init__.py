"""Running experiments: the run spec, the one run pipeline and its record schema, the toy and search runs, grids,
full-scale runs and their plan, the models."""
