"""Reading results: statistics, tables, the paper's numbers, the answer page, plots by subject."""
