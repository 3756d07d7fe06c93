"""``python -m trgrpo.course``: the command line of :mod:`trgrpo.teach.course` (the module moved there)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("trgrpo.teach.course", run_name="__main__", alter_sys=True)
