"""figures/<experiment>/findings.md as committed, for the default experiment and the toy, is a page a reader can hold: an opening of at most OPENING_WORDS words (the
text before the first table or the second heading) that says what the toy found about each claim of the paper, the
claims scorecard as a table, at most FILE_WORDS words in all, and no bullet over BULLET_CHARS characters (the per-row
enumerations live in figures/<experiment>/tables/)."""
import re

import pytest

from conftest import ROOT, TOY, default_experiment
from opd import findings as F
from opd import scorecard as S

PAGES = {e: (ROOT / "figures" / e / "findings.md").read_text() for e in (default_experiment(), TOY)}


@pytest.fixture(params=sorted(PAGES))
def page(request):
    return PAGES[request.param]


def test_the_opening_is_short_and_speaks_of_every_claim(page):
    opening = F.opening_text(page)
    assert F.words(opening) <= F.OPENING_WORDS, f"opening: {F.words(opening)} words"
    assert "persistence" in opening and "guard" in opening  # the clearest finding and the guard keep their lines
    said = lambda w: re.search(rf"\b{re.escape(w)}\b", opening)  # noqa: E731 (whole words: "agrees" is not in "disagrees")
    verdicts = [v for v in S.VERDICTS if said(v) or said(v.split()[0])]
    assert S.DISAGREES.removesuffix("s") in opening and len(verdicts) >= 3


def test_the_whole_file_and_every_bullet_are_within_their_limits(page):
    assert F.words(page) <= F.FILE_WORDS, f"findings.md: {F.words(page)} words"
    long = [ln[:80] for ln in page.splitlines() if ln.startswith("- ") and len(ln) > F.BULLET_CHARS]
    assert not long, f"bullets over {F.BULLET_CHARS} characters: {long}"


def test_the_scorecard_is_a_table_of_claim_paper_toy_verdict(page):
    section = page[page.index("## Claims scorecard"):].split("\n\n")
    table = next(block for block in section if block.startswith("|")).splitlines()
    assert table[0] == "| claim | paper | toy | verdict |" and len(table) >= 2 + 5
    for line in table[2:]:
        cells = re.split(r"(?<!\\)\|", line)[1:-1]
        assert len(cells) == 4 and any(f"**{v}**" in cells[3] for v in S.VERDICTS), line


def test_the_limits_are_counted_as_the_helpers_say():
    text = "# T\n\none two three\n\n| a | b |\n|---|---|\n\n## Next\n\n- x"
    assert F.opening_text(text) == "# T\n\none two three\n" and F.words("a  b\nc |") == 4
    assert F.opening_text("# T\n\nfour words are here\n\n## S\n\nmore") == "# T\n\nfour words are here\n"
