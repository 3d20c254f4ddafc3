"""Submitting a live admin's forms over HTTP as a browser would: every field the page
renders, with its current value, then the test's changes (tests/integration)."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import requests

from tests.integration.harness import HTTP_TIMEOUT


class _FormFields(HTMLParser):
    """The named fields of the page's form with id `form_id`, with the values a browser
    would send: inputs, ticked checkboxes, textareas, each select's selected option."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.fields: dict[str, str] = {}
        self.select: str | None = None
        self.chosen: set[str] = set()  # selects with an option marked `selected`
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "option" and self.select is not None:
            if "selected" in a or self.select not in self.fields:
                if self.select not in self.chosen:
                    self.fields[self.select] = a.get("value", "")
                if "selected" in a:
                    self.chosen.add(self.select)
            return
        name = a.get("name")
        if not name:
            return
        if tag == "input" and a.get("type") not in ("submit", "button"):
            if a.get("type") != "checkbox":
                self.fields[name] = a.get("value", "")
            elif "checked" in a:
                self.fields[name] = a.get("value") or "on"
        elif tag == "select":
            self.select = name
        elif tag == "textarea":
            self.textarea, self.fields[name] = name, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.fields[self.textarea] += data


def submit(
    session: requests.Session, url: str, changes: dict[str, Any], *, form_id: str
) -> requests.Response:
    """GET the admin page at `url`, POST its form `form_id` back with `changes` applied
    (a value None unticks a checkbox or drops the field); returns the POST's response."""
    page = session.get(url, timeout=HTTP_TIMEOUT)
    page.raise_for_status()
    parser = _FormFields(form_id)
    parser.feed(page.text)
    data = {**parser.fields, "_save": "Save"}
    for name, value in changes.items():
        if value is None:
            data.pop(name, None)
        else:
            data[name] = str(value)
    return session.post(url, data=data, headers={"Referer": url}, timeout=HTTP_TIMEOUT)
