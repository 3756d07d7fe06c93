"""Unit tests of trgrpo/runs/: tests/runs/test_<module>.py; :func:`refused`, the check their commands share."""


def refused(capsys, rc, *needles):
    """A command's refusal of bad input: exit 2, one line on stderr without a traceback, holding each of ``needles``;
    returns the line."""
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert str(needle) in lines[0], (needle, lines[0])
    return lines[0]
