"""Reports, beneath the runs: tables of records (:mod:`.tables`), the answer page's verdicts (:mod:`.answers`) and
the figures of runs (:mod:`.plots`). They read records; they train nothing."""
