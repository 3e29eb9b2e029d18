"""The specifications live in the repository (docs/spec/): every "ADR 0041 §N", "DESIGN.md §N" and "skeleton §N"
cited in the code and the docs names a heading there, and the links of docs/spec/ and docs/design-notes.md land."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec"

# Which spec page a citation's document name means. "ADR" alone is ADR 0041 (the only ADR zhin implements;
# ADR 0043 / 0045 are revisions folded into it and are not matched here).
CITED_DOCUMENTS: dict[str, str] = {"adr": "prompt-segments.md", "design": "product.md", "skeleton": "preset-skeleton.md"}
_SECTION = r"§\d+(?:\.\d+)*"
# "ADR 0041 §1, §4", "ADR §2–3", "DESIGN.md §3", "`shared/design/DESIGN.md` §3", "skeleton §8"
CITATION = re.compile(
    r"\b(?P<doc>ADR(?: 0041)?|DESIGN(?:\.md)?|skeleton)`?[ \u00a0]+"
    rf"(?P<sections>{_SECTION}(?:\s*(?:,|and|/|–|-)\s*(?:§?\d+(?:\.\d+)*))*)"
)
SECTION_NUMBER = re.compile(r"§?(\d+(?:\.\d+)*)")
# "ADR 0041 acceptance 5a", "ADR acceptance 5", "criterion 5a"
CRITERION = re.compile(r"\b(?:ADR(?: 0041)? acceptance(?: criterion)?|criterion) (?P<n>\d+[a-z]?)\b")


@dataclass(frozen=True)
class Citation:
    where: str
    spec_page: str
    section: str


def _md() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": True}).enable("table")


def _inline_text(token: Token) -> str:
    return "".join(child.content for child in token.children or [] if child.type in {"text", "code_inline"})


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, keep letters, marks, digits, connector punctuation, spaces and
    hyphens, spaces to hyphens."""
    kept = "".join(ch for ch in text.lower() if ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc")
    return kept.replace(" ", "-")


def headings(markdown: str) -> list[str]:
    tokens = _md().parse(markdown)
    return [_inline_text(tokens[i + 1]) for i, token in enumerate(tokens) if token.type == "heading_open"]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (a repeated slug gets -1, -2, …)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for text in headings(markdown):
        slug = github_slug(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def section_numbers(markdown: str) -> set[str]:
    """The section numbers a page's headings carry: "## §6 Data sources" → "6", "### §2.2 …" → "2.2"."""
    return {match.group(1) for text in headings(markdown) if (match := re.match(r"§(\d+(?:\.\d+)*)\s", text))}


def criteria(markdown: str) -> set[str]:
    return set(re.findall(r"\*\*Criterion (\d+[a-z]?)\.\*\*", markdown))


def citations(text: str, where: str) -> list[Citation]:
    found = []
    for line_number, line in enumerate(text.splitlines(), 1):
        for match in CITATION.finditer(line):
            page = CITED_DOCUMENTS[match.group("doc").split()[0].split(".")[0].lower()]
            for number in SECTION_NUMBER.findall(match.group("sections")):
                found.append(Citation(f"{where}:{line_number}", page, number))
    return found


def unresolved(cited: list[Citation], pages: dict[str, str]) -> list[str]:
    numbers = {page: section_numbers(text) for page, text in pages.items()}
    return [f"{c.where}: {c.spec_page} has no §{c.section}" for c in cited if c.section not in numbers.get(c.spec_page, set())]


def _cited_files() -> list[Path]:
    files = sorted((ROOT / "zhin_cli").rglob("*.py")) + sorted((ROOT / "docs").rglob("*.md"))
    return files + [path for path in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if path.exists()]


def _spec_pages() -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in SPEC.glob("*.md")}


def test_every_cited_section_is_a_heading_in_docs_spec() -> None:
    cited = [c for path in _cited_files() for c in citations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert len(cited) > 50, "the citation finder found almost nothing: is the pattern still right?"
    assert unresolved(cited, _spec_pages()) == []


def test_a_made_up_section_is_reported() -> None:
    """Negative control: a section the spec does not have, in each citation form, is reported."""
    pages = _spec_pages()
    text = "ADR 0041 §99\nsee ADR §2, §42 here\nDESIGN.md §7\n`shared/design/DESIGN.md` §9\nskeleton §77\nADR §6.9\n"
    assert unresolved(citations(text, "x.md"), pages) == [
        "x.md:1: prompt-segments.md has no §99",
        "x.md:2: prompt-segments.md has no §42",
        "x.md:3: product.md has no §7",
        "x.md:4: product.md has no §9",
        "x.md:5: preset-skeleton.md has no §77",
        "x.md:6: prompt-segments.md has no §6.9",
    ]
    # the real ones in the same forms resolve, ranges and lists included
    good = "ADR 0041 §2–3\nADR §4, §7\nDESIGN §4\nDESIGN.md §3\nskeleton §8\nADR 0041 §2.2\n"
    assert len(citations(good, "y.md")) == 8 and unresolved(citations(good, "y.md"), pages) == []


def test_every_cited_acceptance_criterion_is_in_the_spec() -> None:
    listed = criteria((SPEC / "prompt-segments.md").read_text(encoding="utf-8"))
    assert {str(n) for n in range(1, 9)} | {"5a"} <= listed
    files = _cited_files() + sorted((ROOT / "eval_cases").glob("*.yaml"))
    cited = [(str(path.relative_to(ROOT)), m.group("n")) for path in files for m in CRITERION.finditer(path.read_text(encoding="utf-8"))]
    assert cited, "no acceptance criterion cited anywhere: is the pattern still right?"
    assert [(where, n) for where, n in cited if n not in listed] == []
    assert "9" not in listed and "5b" not in listed  # negative control: the list is not everything


@dataclass(frozen=True)
class Link:
    source: Path
    target: str


def links(markdown: str, source: Path) -> list[Link]:
    found = []
    for token in _md().parse(markdown):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(Link(source, str(child.attrs.get("href", ""))))
    return found


def broken(link: Link) -> str | None:
    """Why a relative link does not land (its file is missing, or its #anchor is no heading there), or None."""
    parts = urlsplit(link.target)
    if parts.scheme or parts.netloc:
        return None
    target = (link.source.parent / unquote(parts.path)).resolve() if parts.path else link.source
    if not target.exists():
        return f"{link.source.relative_to(ROOT)}: {link.target}: no such file"
    if parts.fragment and target.suffix == ".md" and parts.fragment not in anchors(target.read_text(encoding="utf-8")):
        return f"{link.source.relative_to(ROOT)}: {link.target}: no heading #{parts.fragment}"
    return None


def _linking_docs() -> list[Path]:
    return sorted(SPEC.glob("*.md")) + [ROOT / "docs" / "design-notes.md"]


def test_relative_links_of_the_spec_and_the_design_notes_land() -> None:
    found = [link for path in _linking_docs() for link in links(path.read_text(encoding="utf-8"), path)]
    assert len(found) > 30
    assert [reason for link in found if (reason := broken(link))] == []


def test_the_link_checker_reports_a_missing_file_and_a_missing_anchor() -> None:
    """Negative control: both kinds of broken link are reported, a good one is not."""
    source = SPEC / "README.md"
    text = "[a](nope.md) [b](prompt-segments.md#no-such-heading) [c](prompt-segments.md#6-data-sources) [d](https://x.invalid/y)"
    reasons = [broken(link) for link in links(text, source)]
    assert reasons == [
        "docs/spec/README.md: nope.md: no such file",
        "docs/spec/README.md: prompt-segments.md#no-such-heading: no heading #no-such-heading",
        None,
        None,
    ]


def test_slugs_are_githubs() -> None:
    assert github_slug("Presets (SillyTavern chat-completion presets as the messages[] skeleton)") == (
        "presets-sillytavern-chat-completion-presets-as-the-messages-skeleton")
    assert github_slug("§2.2 Downgrade by provider capability") == "22-downgrade-by-provider-capability"
    assert anchors("# A\n## A\n") == {"a", "a-1"}


def test_design_notes_links_elsewhere_in_the_repository_land() -> None:
    """The anchors other pages and the code use into docs/design-notes.md are headings there."""
    pattern = re.compile(r"design-notes\.md#([\w-]+)")
    notes = anchors((ROOT / "docs" / "design-notes.md").read_text(encoding="utf-8"))
    used = {(str(path.relative_to(ROOT)), anchor) for path in _cited_files() + sorted((ROOT / "tests").glob("*.py"))
            if path != Path(__file__) for anchor in pattern.findall(path.read_text(encoding="utf-8"))}
    assert used, "no link into design-notes.md found: is the pattern still right?"
    assert sorted((where, anchor) for where, anchor in used if anchor not in notes) == []


def _han(text: str) -> list[str]:
    return [ch for ch in text if "CJK UNIFIED IDEOGRAPH" in unicodedata.name(ch, "")]


def test_the_spec_is_in_the_projects_own_english() -> None:
    """No passage of the Chinese source documents is pasted into docs/spec/ (negative control: the detector sees Han)."""
    assert _han("段组装器 segment") != [] and _han("segment §3 — “x”") == []
    assert {page: "".join(_han(text))[:20] for page, text in _spec_pages().items() if _han(text)} == {}


def contents_gaps(markdown: str) -> tuple[list[str], list[str]]:
    """Headings missing from the page's "Contents" list, and Contents entries that are no heading."""
    contents = markdown.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0] if "\n## Contents\n" in markdown else ""
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    tokens = _md().parse(markdown)
    slugs = [github_slug(_inline_text(tokens[i + 1])) for i, token in enumerate(tokens)
             if token.type == "heading_open" and token.tag != "h1"]
    slugs = [slug for slug in slugs if slug != "contents"]
    return [slug for slug in slugs if slug not in listed], [slug for slug in listed if slug not in slugs]


def test_design_notes_contents_lists_every_heading() -> None:
    assert contents_gaps((ROOT / "docs" / "design-notes.md").read_text(encoding="utf-8")) == ([], [])


def test_contents_gaps_are_reported() -> None:
    """Negative control: a heading left out of the Contents, and an entry with no heading, are both found."""
    page = "# T\n\n## Contents\n\n- [A](#a)\n- [Gone](#gone)\n\n## A\n\n### B\n"
    assert contents_gaps(page) == (["b"], ["gone"])
