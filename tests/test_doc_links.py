"""Every relative link of the user docs (README.md, config/README.md, docs/) opens a file of the repository, and an
anchor (`page.md#heading`) one of that page's headings; no user doc points outside the repository."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings: lower case, punctuation dropped, spaces as '-'."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    }


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(root):
            broken.append(f"{target} (outside the repository)")
        elif not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no such heading)")
    return broken


def test_every_doc_link_resolves_inside_the_repository():
    broken = {str(page.relative_to(ROOT)): links for page in DOCS if (links := broken_links(page))}
    assert not broken, broken


def test_the_check_finds_a_missing_file_an_anchor_and_a_path_outside(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "shared.md").write_text("# Outside\n")
    (root / "other.md").write_text("# Title\n## Many runs per job (bundles)\n")
    page = root / "page.md"
    page.write_text(
        "[a](other.md#many-runs-per-job-bundles) [b](gone.md) [c](other.md#nothing) "
        "[d](../shared.md) [e](https://example.org/x) [f](#title)\n```\n[g](in-a-fence.md)\n```\n"
    )
    assert broken_links(page, root) == [
        "gone.md (no such file)",
        "other.md#nothing (no such heading)",
        "../shared.md (outside the repository)",
        "#title (no such heading)",
    ]


SECTION_REFERENCE = re.compile(r'(?:\]\(|\b)((?:\.\./)?(?:docs/|config/)?[\w-]+\.md)(?:#[\w-]+)?\)?,? "([^"\s][^"]*)"')


def missing_sections(text: str, here: Path, root: Path = ROOT) -> list[str]:
    """References written `page.md "Heading"` or `[page](page.md) "Heading"` whose page has no heading starting with
    or containing the quoted words."""
    missing = []
    for name, section in SECTION_REFERENCE.findall(text):
        section = " ".join(section.split())
        page = next((p for p in (here / name, root / name, root / "docs" / Path(name).name) if p.exists()), None)
        headings = (
            re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.MULTILINE) if page else []
        )
        if not any(section in " ".join(heading.split()) for heading in headings):
            missing.append(f'{name} "{section}"')
    return missing


def test_every_quoted_section_exists():
    sources = [
        *DOCS,
        *sorted((ROOT / "src").rglob("*.py")),
        *sorted((ROOT / "workflow").rglob("*.smk")),
        ROOT / "workflow" / "Snakefile",
        *sorted((ROOT / "config").glob("*.yaml")),
    ]
    missing = {
        str(path.relative_to(ROOT)): found
        for path in sources
        if path.exists() and (found := missing_sections(path.read_text(encoding="utf-8"), path.parent))
    }
    assert not missing, missing


def test_the_section_check_finds_a_heading_that_is_gone(tmp_path):
    (tmp_path / "page.md").write_text("# Page\n## Many runs per job (bundles)\n")
    text = 'see page.md "Many runs per job" and [page](page.md) "Where the time goes"'
    assert missing_sections(text, tmp_path, tmp_path) == ['page.md "Where the time goes"']
