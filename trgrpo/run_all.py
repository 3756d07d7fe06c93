"""``python -m trgrpo.run_all``: the command line of :mod:`trgrpo.tooling.run_all` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.tooling.run_all", run_name="__main__", alter_sys=True)
