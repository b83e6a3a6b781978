"""MkDocs hook: the configuration reference page is generated from components/settings.py at build time
(pipeline/config_reference.py), so it always says what the code checks."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLACEHOLDER = "<!-- generated from components/settings.py -->"


def on_page_markdown(markdown, page, config, files):
    if PLACEHOLDER not in markdown:
        return markdown
    from pipeline.config_reference import render_markdown
    return markdown.replace(PLACEHOLDER, render_markdown())
