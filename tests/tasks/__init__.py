"""Unit tests of trgrpo/tasks/: tests/tasks/test_<module>.py."""
