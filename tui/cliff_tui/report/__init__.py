"""Headless output: samples, runs, triangulations and what fits, as json, jsonl, csv or md
(llama-bench's formats), a module for each (the formats themselves in :mod:`.tables`). Plain data
in, text out; the screens never come through here.

Every format is safe to print to a terminal: strings are inert (:mod:`cliff_tui.text`), JSON
escapes what is not ASCII, a markdown cell escapes ``|``, and a CSV or markdown cell that a
spreadsheet would run as a formula (a leading ``=`` ``+`` ``-`` ``@`` that is not a plain figure
such as ``-3%``) starts with ``'``: a pasted markdown table lands in spreadsheets too."""
