"""Unit tests of trgrpo/runs/: tests/runs/test_<module>.py."""
