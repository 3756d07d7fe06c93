"""``python -m trgrpo.plan``: the command line of :mod:`trgrpo.pipeline.plan` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.pipeline.plan", run_name="__main__", alter_sys=True)
