"""Unit tests of the top-level modules of trgrpo/ (the method): tests/trgrpo/test_<module>.py."""
