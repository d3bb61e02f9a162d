"""README.md: what a newcomer reads in five minutes, and every link in it leads somewhere.

MkDocs checks the links inside docs/ (``mkdocs build --strict`` in scripts/test.sh); the README
sits outside the site, so its links to the docs pages and their sections are checked here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page, as MkDocs' toc extension makes them."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    headings = re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M)
    return {slugify(heading.replace("`", ""), "-") for heading in headings}


def test_readme_fits_on_a_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_set_up_commands_are_the_scripts_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Set-up: two commands\n.*?```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["scripts/demo.sh", "scripts/test.sh"]
    for command in commands:
        assert os.access(ROOT / command, os.X_OK), command
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # The demo's port, as the README tells it, is the one demo.sh reads.
    assert "BONUSJUDGE_PORT=8766 scripts/demo.sh" in text
    assert "${BONUSJUDGE_PORT:-8765}" in (ROOT / "scripts" / "demo.sh").read_text("utf-8")


def test_readme_links_resolve() -> None:
    links = LINK.findall(README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.is_file(), f"README.md links to {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"README.md links to {link}: no such section"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {link.partition("#")[0] for link in LINK.findall(README.read_text("utf-8"))}
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert pages - linked - {"docs/index.md"} == set()


def test_the_typescript_steps_leave_the_clone_as_it_was() -> None:
    """Issue 40: the README's TypeScript steps left package.json, node_modules/ and the generated
    .d.ts untracked. The example ships its package.json and lock (the versions the harness test
    runs), and what the steps make is ignored."""
    import json
    import subprocess

    text = README.read_text(encoding="utf-8")
    steps = re.search(r"```bash\n(cd examples/typescript.*?)```", text, flags=re.S)
    assert steps is not None
    assert steps.group(1).splitlines()[0].split("#")[0].strip() == (
        "cd examples/typescript && npm ci")
    example = ROOT / "examples" / "typescript"
    made = ["node_modules/openapi-fetch/package.json", "bonusjudge-api.d.ts"]
    ignored = subprocess.run(["git", "check-ignore", *made], cwd=example, capture_output=True,
                             text=True, check=False).stdout.split()
    assert ignored == made
    tracked = subprocess.run(["git", "ls-files", "package.json", "package-lock.json"],
                             cwd=example, capture_output=True, text=True, check=True).stdout.split()
    assert tracked == ["package-lock.json", "package.json"]
    ours = json.loads((example / "package.json").read_text(encoding="utf-8"))
    tested = json.loads((ROOT / "harness" / "node" / "package.json").read_text(encoding="utf-8"))
    pins = {**ours["dependencies"], **ours["devDependencies"]}
    assert pins == {name: tested["dependencies"][name] for name in pins}
