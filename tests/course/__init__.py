"""Tests of the course/ package (outside trgrpo/): tests/course/test_<module>.py."""
