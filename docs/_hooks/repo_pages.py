"""MkDocs hook: the repository files the documentation links to become part of the site.

The pages under ``docs/`` are read in two places: on a forge or in an editor, where a link such as
``../figures/lab/README.md`` is a path in the checkout, and in the site MkDocs builds, which knows only the files under
``docs/`` and (with ``strict: true``) refuses a link to anything else. Rather than drop those links or send them to a
forge, this hook brings their targets into the site, under ``repo/`` with the repository's own layout:

* every repository path a page links to (a page under ``docs/``, or a repository page already brought in: the closure
  of the links) is added to the site: a markdown file as a page (``README.md`` becomes its folder's index, as MkDocs
  does), any other file as a copy;
* a link to a folder goes to its ``README.md``, or, for a folder without one, to a generated page listing the folder's
  tracked files (markdown files linked as pages, files up to :data:`MAX_COPY_BYTES` linked as copies, larger ones named);
* links are rewritten on the parsed page (never inside code), so a link from a repository page to ``docs/x.md`` lands on
  the site's own page ``x.md``, and one from ``docs/`` to ``../README.md`` on ``repo/``.

A link whose target does not exist in the repository is left as it is, so MkDocs' own validation reports it and the
strict build fails: nothing is checked less than a page under ``docs/``.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import xml.etree.ElementTree as etree
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown import Extension
from markdown.treeprocessors import Treeprocessor
from mkdocs.structure.files import File, Files

#: where repository files live in the site
PREFIX = "repo"
#: a folder listing links a copy of a file up to this size (a larger one is only named)
MAX_COPY_BYTES = 2_000_000

_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCED = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`+[^`]*`+")

_state: dict = {}


def _tracked(root: Path) -> set[str]:
    """The repository's tracked files (``git ls-files``), or every file when this is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        return {p for p in out.decode("utf-8").split("\0") if p}
    except (OSError, subprocess.CalledProcessError):
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


def _repo_path(src_uri: str) -> str:
    """The repository path of a site file: ``docs/<uri>`` for the documentation, ``<path>`` for ``repo/<path>``."""
    if src_uri.startswith(PREFIX + "/"):
        return src_uri[len(PREFIX) + 1:]
    return "docs/" + src_uri


def _site_uri(repo_path: str) -> str:
    """The site file that stands for a repository file."""
    return repo_path[len("docs/"):] if repo_path.startswith("docs/") else f"{PREFIX}/{repo_path}"


def _target(page_uri: str, href: str) -> tuple[str, str] | None:
    """``(repository path, fragment)`` of a relative link on the site page ``page_uri``, or None for a link this hook
    leaves alone (absolute, external, an anchor on the same page)."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith(("/", "#")) or not parts.path:
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(_repo_path(page_uri)), unquote(parts.path)))
    if path.startswith("../") or path == "..":
        return None
    return path, parts.fragment


def _resolve(path: str) -> str | None:
    """The repository file a link to ``path`` shows in the site: the file, a folder's README.md or its generated
    listing (``<folder>/index.md``); None when the path does not exist."""
    root: Path = _state["root"]
    p = root / path
    if path == ".":
        return "README.md"
    if p.is_file():
        return path
    if p.is_dir():
        return f"{path}/README.md" if (p / "README.md").is_file() else f"{path}/index.md"
    return None


def _listing(folder: str) -> str:
    """A generated page for a folder without a README: its tracked files and subfolders."""
    root: Path = _state["root"]
    prefix = folder.rstrip("/") + "/"
    entries = sorted({p[len(prefix):].split("/")[0] + ("/" if "/" in p[len(prefix):] else "")
                      for p in _state["tracked"] if p.startswith(prefix)})
    lines = [f"# `{folder}/`", "", "The folder's files in the repository (this page is generated; the folder has no README).", ""]
    for e in entries:
        if e.endswith("/") or e.endswith(".md") or (root / prefix / e).stat().st_size <= MAX_COPY_BYTES:
            lines.append(f"* [`{e}`]({e})")
        else:
            lines.append(f"* `{e}` ({(root / prefix / e).stat().st_size / 1e6:.1f} MB, not copied into the site)")
    return "\n".join(lines) + "\n"


def _links(markdown: str) -> list[str]:
    """The link and image targets of a markdown text outside code (a superset is harmless: only existing paths count)."""
    text = _CODE.sub("", _FENCED.sub("", markdown))
    return [m.group(1) for m in _LINK.finditer(text)]


def on_config(config):
    root = Path(config.config_file_path).resolve().parent
    _state.update(root=root, tracked=_tracked(root), page=None)
    config.markdown_extensions.append(_RepoLinks())
    return config


def on_files(files: Files, config) -> Files:
    """Add every repository file the documentation reaches by links, transitively."""
    root: Path = _state["root"]
    todo = [(f.src_uri, Path(f.abs_src_path).read_text(encoding="utf-8")) for f in files.documentation_pages()]
    added: set[str] = set()
    while todo:
        uri, markdown = todo.pop()
        for href in _links(markdown):
            t = _target(uri, href)
            if t is None or t[0].startswith("docs/"):
                continue
            path = _resolve(t[0])
            if path is None or _site_uri(path) in added or files.get_file_from_path(_site_uri(path)):
                continue
            site = _site_uri(path)
            added.add(site)
            if path.endswith("/index.md") and not (root / path).is_file():
                text = _listing(path[: -len("/index.md")])
                files.append(File.generated(config, site, content=text))
            else:
                files.append(File.generated(config, site, abs_src_path=str(root / path)))
                text = (root / path).read_text(encoding="utf-8") if path.endswith(".md") else ""
            if site.endswith(".md"):
                todo.append((site, text))
    return files


def on_page_markdown(markdown, page, config, files):
    _state["page"] = page.file.src_uri  # the page the link rewriter below is about to see
    return markdown


class _RewriteLinks(Treeprocessor):
    """Point each relative ``href`` / ``src`` of the page at the site file that stands for its repository target."""

    def run(self, root: etree.Element) -> None:
        page = _state.get("page")
        if page is None:
            return
        for el in root.iter():
            attr = "href" if el.tag == "a" else "src" if el.tag == "img" else None
            href = el.get(attr) if attr else None
            t = _target(page, href) if href else None
            if t is None or (t[0].startswith("docs/") and not page.startswith(PREFIX + "/")):
                continue  # between pages of docs/: MkDocs' own business
            path = _resolve(t[0])
            if path is None:
                continue  # left for MkDocs to report
            new = posixpath.relpath(_site_uri(path), posixpath.dirname(page) or ".")
            el.set(attr, new + (f"#{t[1]}" if t[1] else ""))


class _RepoLinks(Extension):
    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        # before MkDocs' own link processor (priority 0), which then validates and converts the rewritten links
        md.treeprocessors.register(_RewriteLinks(md), "repo_links", 1)
