"""``python -m trgrpo.train``: the command line of :mod:`trgrpo.pipeline.train` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.pipeline.train", run_name="__main__", alter_sys=True)
