"""``python -m trgrpo.bench``: the command line of :mod:`trgrpo.tooling.bench` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.tooling.bench", run_name="__main__", alter_sys=True)
