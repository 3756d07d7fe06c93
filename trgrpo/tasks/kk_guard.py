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
def _disguise_sets() -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(BMP code points, astral ranges) of the disguising characters (one-off scan of code points, ~20 ms).

    The astral ones (mathematical alphanumerics, enclosed letters) go in two coarse ranges, which also take in
    those blocks' digits, and one range of tag characters and variation selectors."""
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
    return tuple(sorted(bmp)), tuple((a, b) for a, b in ranges)


@functools.lru_cache(maxsize=1)
def _disguise_re() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(BMP, astral) character classes of the disguising characters.

    Two patterns: a BMP-only class compiles to a bitmap (C-speed scan); the astral one is a few ranges."""
    bmp, ranges = _disguise_sets()
    bmp_class = "".join(re.escape(chr(cp)) for cp in bmp)
    astral_class = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(f"[{bmp_class}]"), re.compile(f"[{astral_class}]")


@functools.lru_cache(maxsize=1)
def _astral_gate() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(first bytes, second bytes) of the UTF-8 encodings of the astral disguising characters: F0 or F3, then
    9D, 9F or A0. A text whose UTF-8 bytes lack every first byte or every second byte holds none of them."""
    leads: set[bytes] = set()
    seconds: set[bytes] = set()
    for a, b in _disguise_sets()[1]:
        for cp in range(a, b + 1):  # about 1,200 code points
            enc = chr(cp).encode("utf-8")
            leads.add(enc[:1])
            seconds.add(enc[1:2])
    return tuple(sorted(leads)), tuple(sorted(seconds))


def disguised_letters(answer_text: str, utf8: bytes | None = None) -> bool:
    """True if the text holds a character that reads as a letter of "knight"/"knave" without being it
    ("ｋ", "𝐤", Cyrillic "к"/"а"/"е", Greek "ν", ...) or an invisible one (zero-width space, soft hyphen, bidi
    marks) -- the means to write a knight/knave mention that Logic-RL's count does not see. Linear time.

    ``utf8``: the text's UTF-8 bytes (``surrogatepass``) where the caller has them, as the reward does. The scan for
    astral characters (~7 ms per MB of text) runs only when those bytes hold both a first and a second byte of one
    (:func:`_astral_gate`: a C-level ``memchr`` per byte value, ~0.1 ms per MB).
    """
    if answer_text.isascii():
        return False
    bmp, astral = _disguise_re()
    if bmp.search(answer_text) is not None:
        return True
    data = answer_text.encode("utf-8", "surrogatepass") if utf8 is None else utf8
    leads, seconds = _astral_gate()
    if not (any(b in data for b in leads) and any(b in data for b in seconds)):
        return False
    return astral.search(answer_text) is not None
