"""Tests of scripts/: tests/scripts/test_<script>.py."""
