"""MkDocs hook: pages generated at build time from the code and the repository's own files, so
the site never drifts from them.

- ``cli.md``: every ``graphdist`` command's ``--help``, rendered from the argparse parsers
  (``graphdist.cli.build_parser``) that the console script runs;
- ``benchmarks.md`` and ``architecture.md``: ``BENCHMARKS.md`` and ``ARCHITECTURE.md`` as they
  are in the repository (BENCHMARKS.md's links into ``docs/`` made relative to the site);
- ``data-cards/*.md``: the dataset cards ``datasets/*/README.md`` (and ``datasets/README.md``);
- ``examples/*.md``: the example scripts of ``examples/``, whole.

The docstrings use Sphinx roles (``:class:`~graphdist.errors.GraphdistError` ``); on the API pages
the role's name is dropped and ``~a.b.C`` shows as ``C``, as Sphinx shows it.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[2]
COLUMNS = "100"  # the width the help text is wrapped at (argparse reads $COLUMNS)


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def cli_reference() -> str:
    """The CLI reference page: the top-level help, then each command's (and sub-command's)."""
    sys.path.insert(0, str(REPO))
    from graphdist.cli import build_parser
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        top = build_parser()
        out = ["# CLI reference", "",
               "Generated from the argparse parsers of the `graphdist` console script when the site is "
               "built (`docs/hooks/generated.py`), so it is exactly what `graphdist CMD --help` prints. "
               "Every flag maps onto a field of the command's typed config dataclass (see the "
               "[API reference](api/gnn.md)); user errors print one line on stderr and exit with code 2.",
               "", "```", top.format_help().rstrip(), "```", ""]
        for name, p in _subparsers(top).items():
            out += [f"## `graphdist {name}`", "", "```", p.format_help().rstrip(), "```", ""]
            for sub, sp in _subparsers(p).items():
                out += [f"### `graphdist {name} {sub}`", "", "```", sp.format_help().rstrip(), "```", ""]
        return "\n".join(out)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _card(text: str) -> str:
    # datasets/README.md links to X/README.md; on the site the cards are data-cards/X.md
    text = re.sub(r"\]\(([a-z0-9_]+)/README\.md\)", r"](\1.md)", text)
    return re.sub(r"\[([^\]]+)\]\(SHA256SUMS\)", r"`datasets/planetoid/\1`", text)


def on_files(files, config):
    def add(uri: str, content: str) -> None:
        files.append(File.generated(config, uri, content=content))

    add("cli.md", cli_reference())
    # BENCHMARKS.md links to its details and history as docs/X.md (right on GitHub); on the site they sit beside it
    add("benchmarks.md", re.sub(r"\]\(docs/", "](", (REPO / "BENCHMARKS.md").read_text()))
    add("architecture.md", (REPO / "ARCHITECTURE.md").read_text())
    add("data-cards/index.md", _card((REPO / "datasets" / "README.md").read_text()))
    for card in sorted((REPO / "datasets").glob("*/README.md")):
        add(f"data-cards/{card.parent.name}.md", _card(card.read_text()))
    for ex in sorted((REPO / "examples").glob("*.py")):
        add(f"examples/{ex.stem}.md", f"# examples/{ex.name}\n\n```python\n{ex.read_text().rstrip()}\n```\n")
    return files


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc):<code>(~?)([^<]*)</code>")


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith("api/"):
        return html
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)
