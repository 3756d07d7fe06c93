"""The look-alike guard of the K&K answer parser (an addition to the paper's Table 5 reward, App. B.1.1).

Logic-RL's parser counts the "knight"/"knave" mentions of an answer and requires one per person. A mention written
with characters that imitate the ASCII letters ("ｋｎａｖｅ", "𝐤𝐧𝐚𝐯𝐞", Cyrillic "кnаvе") or with an invisible
character inside the word (zero-width space, soft hyphen, variation selector) escapes that count: without this
guard "Zoey is a ｋｎａｖｅ. Zoey is a knight." scored the full 3 while naming both roles.
:func:`disguised_letters` finds such characters in linear time; :mod:`trgrpo.tasks.kk_reward` calls an answer that
holds one unparseable.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Characters that read as a letter of "knight"/"knave" but are not that ASCII letter: compatibility forms (NFKC
# folds them: fullwidth, mathematical alphanumerics, circled, super-/subscript, the Kelvin sign; found by scanning
# the code points once) and look-alikes from other scripts that NFKC leaves alone; plus invisible characters
# (soft hyphen, zero-width and bidi marks, BOM) that can sit inside a word unseen.
_HOMOGLYPHS = "кКκΚĸᴋΝɴіІıιΙӏɪɡԍɢһҺΗНʜТΤᴛаАαΑɑѵѴνᴠеЕΕҽ"
_INVISIBLE = [0xAD, 0x34F, 0x61C, 0x115F, 0x1160, 0x17B4, 0x17B5, *range(0x180B, 0x1810), *range(0x200B, 0x2010)]
_INVISIBLE += [*range(0x202A, 0x202F), *range(0x2060, 0x2065), 0xFEFF]
# blank letters (Hangul fillers, the Braille blank): they print as nothing or a space, but are not white space
_INVISIBLE += [0x2800, 0x3164, 0xFFA0]
# Combining marks and format characters (variation selectors U+FE0F, tag characters U+E0020...U+E007F, combining
# accents): they attach to or hide inside a word, "kn\ufe0fave" is read as a knave by a reader, not by the count.
_HIDING_CATEGORIES = ("Mn", "Me", "Cf")


@functools.lru_cache(maxsize=1)
def _disguise_re() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(BMP, astral) character classes of the disguising characters (one-off scan of code points, ~20 ms).

    Two patterns: a BMP-only class compiles to a bitmap (C-speed scan); the astral ones (mathematical
    alphanumerics, enclosed letters) go in two coarse ranges, which also take in those blocks' digits."""
    letters = set("knightave")
    bmp = {ord(c) for c in _HOMOGLYPHS} | set(_INVISIBLE)
    astral: list[int] = []
    for cp in range(0x80, 0x20000):
        ch = chr(cp)
        hides = cp < 0x10000 and unicodedata.category(ch) in _HIDING_CATEGORIES  # astral ones: one range below
        if not hides and unicodedata.normalize("NFKC", ch).lower() not in letters:
            continue
        if cp < 0x10000:
            bmp.add(cp)
        else:
            astral.append(cp)
    ranges: list[list[int]] = []
    for cp in astral:  # a few coarse ranges (gaps up to 64 closed): a long class list would scan ~100x slower
        if ranges and cp <= ranges[-1][1] + 64:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    ranges.append([0xE0000, 0xE01EF])  # tag characters and variation selectors 17-256 (format / combining)
    bmp_class = "".join(re.escape(chr(cp)) for cp in sorted(bmp))
    astral_class = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(f"[{bmp_class}]"), re.compile(f"[{astral_class}]")


def disguised_letters(answer_text: str) -> bool:
    """True if the text holds a character that reads as a letter of "knight"/"knave" without being it
    ("ｋ", "𝐤", Cyrillic "к"/"а"/"е", Greek "ν", ...) or an invisible one (zero-width space, soft hyphen, bidi
    marks) -- the means to write a knight/knave mention that Logic-RL's count does not see. Linear time."""
    if answer_text.isascii():
        return False
    bmp, astral = _disguise_re()
    return bmp.search(answer_text) is not None or astral.search(answer_text) is not None
