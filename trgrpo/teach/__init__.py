"""The course around the notebooks: checks for exercises, the GRPO primer, the notebook helper, clean notebook
output."""
