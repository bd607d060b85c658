"""The documentation's links without building the site (``make docs`` builds it strictly, in its own environment).

``tests/test_readme_tour.py`` checks that the relative links of ``docs/*.md`` name existing paths; this module checks
the pages in the folders below (``docs/recipes/``, ``docs/api/``), every ``#anchor`` of a link between pages of
``docs/`` against the target page's headings (slugs as the site's Markdown makes them), and that ``mkdocs.yml``'s
navigation names every page once and only pages that exist."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: folders of docs/ that hold no pages (the site's build hooks)
NOT_PAGES = ("_hooks",)

_LINK = re.compile(r"\]\(\s*([^)\s#]*)(#[^)\s]*)?\s*\)")
_FENCED = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`+[^`\n]*`+")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not set(p.relative_to(DOCS).parts) & set(NOT_PAGES))


def links(page: Path) -> list[tuple[str, str]]:
    """``(path, fragment)`` of the page's links outside code (an empty path: the page itself)."""
    text = _CODE.sub("", _FENCED.sub("", page.read_text(encoding="utf-8")))
    return [(m.group(1), (m.group(2) or "")[1:]) for m in _LINK.finditer(text)]


def slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` extension gives a heading (its default slugify, ASCII)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in _HEADING.findall(_FENCED.sub("", page.read_text(encoding="utf-8")))}


def test_links_of_the_pages_below_docs_resolve():
    bad = []
    for page in pages():
        if page.parent == DOCS:
            continue  # tests/test_readme_tour.py
        for path, _ in links(page):
            if path and not path.startswith(("http://", "https://", "mailto:")) and not (page.parent / path).exists():
                bad.append(f"{page.relative_to(ROOT)}: {path}")
    assert not bad, bad
    assert len([p for p in pages() if p.parent != DOCS]) >= 12


def test_anchors_of_links_between_pages_exist():
    bad = []
    for page in pages():
        for path, frag in links(page):
            target = (page.parent / path).resolve() if path else page
            if frag and target.suffix == ".md" and DOCS in target.parents and frag not in anchors(target):
                bad.append(f"{page.relative_to(ROOT)}: {path}#{frag}")
    assert not bad, bad


def test_slug_matches_the_site():
    assert slug("1. The plug-in") == "1-the-plug-in"
    assert slug("Run `vsr lab` — *fast*") == "run-vsr-lab-fast"


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_the_site_navigation_names_every_page_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    own = [p for p in nav if not p.startswith("repo/")]  # repo/: repository files the site's hook brings in
    assert len(own) == len(set(own))
    assert sorted(own) == sorted(p.relative_to(DOCS).as_posix() for p in pages())
    for p in nav:
        if p.startswith("repo/"):
            assert (ROOT / p.removeprefix("repo/")).is_file(), p
