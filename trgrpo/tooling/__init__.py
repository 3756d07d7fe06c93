"""Tooling around the library, never imported by notebooks: the cost benchmark (``python -m trgrpo.bench``,
split into ``bench_common``, ``bench_step``, ``bench_loss``, ``bench_notebooks`` and ``bench_table``), batch
execution of notebooks (``batch``), ``make run`` (``run_all``) and the prepared GPU check (``gpu_check``)."""
