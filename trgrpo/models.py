"""``python -m trgrpo.models``: the command line of :mod:`trgrpo.pipeline.models` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.pipeline.models", run_name="__main__", alter_sys=True)
