"""Unit tests of trgrpo/reports/: tests/reports/test_<module>.py."""
