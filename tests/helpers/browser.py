"""What a Playwright test does as a person would (drag to zoom) and what it watches (errors)."""

from __future__ import annotations

from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def drag_zoom(page: Any, selector: str, a: float, b: float) -> None:
    """A user's zoom: drag across the chart ``selector`` from ``a`` to ``b`` of its width."""
    drag = page.locator(f"{selector} .nsewdrag").first
    drag.scroll_into_view_if_needed()
    box = drag.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * a, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * b, y, steps=8)
    page.mouse.up()


def collect_errors(page: Any) -> list[str]:
    """Console errors, uncaught page errors and failed requests seen by ``page`` from now on.

    A request the browser itself cancelled (``net::ERR_ABORTED``: a reload or navigation while a
    callback or interval request was in flight) is not the server failing and is not counted;
    resets, empty replies and refused connections are."""
    errors: list[str] = []

    def failed(request: Any) -> None:
        reason = request.failure or ""
        if "ERR_ABORTED" not in reason:
            errors.append(f"request failed: {request.url} ({reason})")

    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", failed)
    return errors


def choose_option(page: Any, dropdown: str, text: str) -> None:
    """Open a dropdown and pick the first option containing ``text`` (scrolled into view: the
    list may open below the card)."""
    box = page.locator(f"#{dropdown}")
    box.scroll_into_view_if_needed()
    box.click()
    option = page.get_by_role("option").filter(has_text=text).first
    option.scroll_into_view_if_needed()
    option.click()
