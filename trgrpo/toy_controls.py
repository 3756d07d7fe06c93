"""``python -m trgrpo.toy_controls``: the command line of :mod:`trgrpo.pipeline.toy_controls` (the module moved
there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.pipeline.toy_controls", run_name="__main__", alter_sys=True)
