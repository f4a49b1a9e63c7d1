"""Sphinx extension of dmsolve's documentation.

- One line per stage of the build (reading, writing, done) on stdout.
- The autosummary tables of the API reference get a third column, *Collective?*,
  with the sentence of each entry's docstring that says whether the call is
  collective (apipages.collective_note).
"""

from __future__ import annotations

import inspect
import time

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.ext.autosummary import Autosummary, autosummary_table, import_by_name
from sphinx.util import rst
from sphinx.util.docutils import switch_source_input
from sphinx.util.parsing import nested_parse_to_nodes

import apipages


class CollectiveAutosummary(Autosummary):
    """``autosummary`` with a column that says whether each entry is collective."""

    def _note(self, real_name: str) -> str:
        try:
            obj = import_by_name(real_name)[1]
        except Exception:  # noqa: BLE001 - an instance attribute, say: no note
            return ""
        return apipages.collective_note(obj)

    def _whole_sentence(self, real_name: str, summary: str) -> str:
        """The docstring's first sentence, when autosummary cut it inside a
        literal (``0 .. p-1``: autosummary ends a sentence at any ". ")."""
        try:
            doc = inspect.getdoc(import_by_name(real_name)[1]) or ""
        except Exception:  # noqa: BLE001
            return summary
        text = " ".join(doc.split("\n\n")[0].split())
        inside = False
        for i, ch in enumerate(text):
            if text.startswith("``", i):
                inside = not inside if i == 0 or text[i - 1] != "`" else inside
            if ch == "." and not inside and (i + 1 == len(text) or text[i + 1] == " "):
                return text[:i + 1]
        return text

    def get_table(self, items):
        table_spec = addnodes.tabular_col_spec()
        table_spec["spec"] = r"\X{1}{4}\X{2}{4}\X{1}{4}"
        table = autosummary_table("")
        real_table = nodes.table("", classes=["autosummary", "longtable"])
        table.append(real_table)
        group = nodes.tgroup("", cols=3)
        real_table.append(group)
        for width in (25, 50, 25):
            group.append(nodes.colspec("", colwidth=width))
        head = nodes.thead("")
        group.append(head)
        body = nodes.tbody("")
        group.append(body)

        def append_row(parent, *column_texts: str) -> None:
            row = nodes.row("")
            source, line = self.state_machine.get_source_and_line()
            for text in column_texts:
                vl = StringList([text], "%s:%d:<autosummary>" % (source, line))
                with switch_source_input(self.state, vl):
                    col_nodes = nested_parse_to_nodes(self.state, vl,
                                                      allow_section_headings=False)
                node = col_nodes[0] if col_nodes and isinstance(
                    col_nodes[0], nodes.paragraph) else nodes.paragraph("")
                row.append(nodes.entry("", node))
            parent.append(row)

        append_row(head, "Name", "Summary", "Collective?")
        for name, sig, summary, real_name in items:
            if summary.count("``") % 2:
                summary = self._whole_sentence(real_name, summary)
            col1 = ":py:obj:`%s <%s>`" % (name, real_name)
            if sig is not None and "nosignatures" not in self.options:
                col1 += "\\ " + rst.escape(sig)
            append_row(body, col1, summary, self._note(real_name))
        return [table_spec, table]


class _Stages:
    """One line per stage of the build on stdout (``make docs`` runs
    ``sphinx-build -q``, which prints only warnings, for minutes)."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        # the clock starts with Sphinx, after docs/conf.py ran the examples
        print("docs: %s (%.0f s into Sphinx)" % (text, time.perf_counter() - self.t0),
              flush=True)

    def reading(self, app, env, docnames) -> None:
        self.say("reading %d new or changed pages" % len(docnames))

    def writing(self, app, builder) -> None:
        self.say("writing the HTML pages")

    def finished(self, app, exception) -> None:
        if exception is None:
            self.say("site built")


def setup(app):
    app.add_directive("autosummary", CollectiveAutosummary, override=True)
    stages = _Stages()
    app.connect("env-before-read-docs", stages.reading)
    app.connect("write-started", stages.writing)
    app.connect("build-finished", stages.finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
