"""The docs site builds with warnings as errors (``mkdocs build --strict``, as CI builds it): no
broken link or anchor, no page left out of the navigation, no docstring mkdocstrings cannot read;
the CLI reference is every command's own ``--help`` and the API reference is the docstrings."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, once_per_run

pytest.importorskip("mkdocs", reason="the docs extras: pip install -e '.[test]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extras: pip install -e '.[test]'")


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    return once_per_run(tmp_path_factory, "docs_site", _build)


def _build(out):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stdout[-4000:] + r.stderr[-4000:]
    return out


def _text(page) -> str:
    import html
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def test_every_guide_and_reference_page_is_built(site):
    for page in ["guides/gcn", "guides/recommender", "guides/dlrm", "guides/pyg", "guides/partitioning",
                 "guides/planning", "guides/fault-tolerance", "guides/multi-node", "cli", "api/gnn", "api/pyg",
                 "api/rec", "api/embeddings", "api/partitioners", "benchmarks", "benchmarks-details",
                 "benchmarks-history"]:
        assert (site / page / "index.html").exists(), page


def test_the_cli_reference_is_what_the_parsers_print(site):
    from graphdist.cli import build_parser
    text = _text(site / "cli" / "index.html")
    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        assert f"graphdist {name}" in text, name
        for a in p._actions:  # every flag of every command, with its help's first words
            for o in a.option_strings:
                assert o in text, (name, o)
            if a.help and a.help != argparse.SUPPRESS:
                words = " ".join(a.help.split()[:3]).replace("%%", "%")
                assert words in " ".join(text.split()), (name, a.option_strings, words)


def test_the_api_reference_renders_the_docstrings(site):
    """Every documented field of the configs (the flags' help) and the entry points' docstrings."""
    from embeddings import DLRMTrainConfig
    from graphdist.config import field_docs
    from graphdist.gnn import GCNConfig
    from graphdist.rec import RecConfig
    from partitioners import partition

    def words(s: str, n: int = 5) -> str:
        return " ".join(s.replace("`", "").split()[:n])

    for page, cls in [("gnn", GCNConfig), ("rec", RecConfig), ("embeddings", DLRMTrainConfig)]:
        text = " ".join(_text(site / "api" / page / "index.html").split())
        assert f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}" in text or cls.__name__ in text, page
        docs = field_docs(cls)
        assert len(docs) > 5, cls
        for name, doc in docs.items():
            assert words(doc) in text, (page, name, words(doc))
    parts = " ".join(_text(site / "api" / "partitioners" / "index.html").split())
    assert words(partition.__doc__, 6) in parts


def test_a_broken_link_or_anchor_is_a_warning():
    """What ``--strict`` turns into errors: a link to a missing page or anchor, a link the site
    cannot resolve, a page outside the navigation (``mkdocs.yml``'s ``validation``)."""
    import logging

    from mkdocs.config import load_config
    cfg = load_config(str(REPO / "mkdocs.yml"))
    v = cfg.validation
    assert (v.links.not_found, v.links.anchors, v.links.unrecognized_links, v.nav.omitted_files,
            v.nav.not_found) == (logging.WARNING,) * 5
