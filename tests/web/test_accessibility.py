"""Accessibility: after a failed submit an error summary (which takes the focus) links every
field in error; each error is tied to its input; badge and status colours meet WCAG AA."""

import re
from pathlib import Path

import pytest

from tests.web.conftest import form_post

CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "headroom.css"
AA_NORMAL_TEXT = 4.5  # WCAG 2.x 1.4.3, text under 18.66 px bold / 24 px


def test_a_failed_submit_gets_a_linked_error_summary_and_described_inputs(owner_client, catalog):
    # given a form with three fields in error (one a checkbox group)
    body = form_post(peak_rps="", prompt_tokens_p95="lots", models=None)
    # when it is submitted
    response = owner_client.post("/scenarios/new/", body)
    html = response.content.decode()
    # then a summary that takes the focus lists each error as a link to its field
    assert response.status_code == 400
    summary = re.search(
        r'<div class="error-summary" id="error-summary"([^>]*)>(.*?)</div>', html, re.S
    )
    assert summary and 'tabindex="-1"' in summary.group(1) and 'role="alert"' in summary.group(1)
    links = re.findall(r'<a href="#(id_[a-z0-9_]+)"', summary.group(2))
    assert set(links) == {"id_peak_rps", "id_prompt_tokens_p95", "id_models"}
    assert "There are 3 problems" in summary.group(2)
    for target in links:
        assert f'id="{target}"' in html, target  # every link lands on an element
    # and each input names its error list (and is marked invalid)
    for name in ("peak_rps", "prompt_tokens_p95"):
        tag = re.search(rf'<input[^>]*id="id_{name}"[^>]*>', html).group(0)
        assert 'aria-invalid="true"' in tag, name
        described = re.search(r'aria-describedby="([^"]*)"', tag).group(1).split()
        assert f"id_{name}_errors" in described and f"id_{name}_unit" in described
        assert f'<ul class="errorlist" id="id_{name}_errors">' in html
    boxes = re.findall(r'<input type="checkbox" name="models"[^>]*>', html)
    assert boxes and all("id_models_errors" in b for b in boxes)
    # while a field without an error is not marked
    ttft = re.search(r'<input[^>]*id="id_ttft_ms"[^>]*>', html).group(0)
    assert "aria-invalid" not in ttft and "_errors" not in ttft


def test_the_page_script_focuses_the_summary():
    script = (CSS.parents[1] / "js" / "headroom.js").read_text()
    assert 'getElementById("error-summary")' in script and "summary.focus()" in script


# --------------------------------------------------------------------------- contrast


def _channel(value: int) -> float:
    c = value / 255
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    if len(h) == 3:
        h = "".join(2 * ch for ch in h)
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return 0.2126 * _channel(r) + 0.7152 * _channel(g) + 0.0722 * _channel(b)


def contrast(a: str, b: str) -> float:
    """WCAG 2.x contrast ratio (L1 + 0.05) / (L2 + 0.05)."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_formula_matches_known_pairs():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic miss
    assert contrast("#ffffff", "#ffffff") == pytest.approx(1.0)


def _rules() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    text = re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)
    variables = dict(re.findall(r"(--[\w-]+):\s*(#[0-9a-fA-F]{3,6})", text))
    rules: dict[str, dict[str, str]] = {}
    for selectors, block in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
        declarations = dict(re.findall(r"([\w-]+)\s*:\s*([^;]+)", block))
        for selector in selectors.split(","):
            rules.setdefault(selector.strip(), {}).update(declarations)
    return variables, rules


def _colour(value: str, variables: dict[str, str]) -> str:
    value = value.strip()
    match = re.fullmatch(r"var\((--[\w-]+)\)", value)
    return variables[match.group(1)] if match else value


# (selector, background when the rule sets none): badges on their own fill, text on the page
PAIRS = [
    (".badge", None),
    (".badge-archived", None),
    (".status-succeeded", "#ffffff"),
    (".status-failed", "#ffffff"),
    (".status-running", "#ffffff"),
    (".status-queued", "#ffffff"),
    (".error-summary a", "#ffffff"),
    (".miss-tag", "#ffffff"),
    (".reason", "#eaf3fc"),  # also shown on a recommended (tinted) row
    (".checklist-status", "#ffffff"),
]


@pytest.mark.parametrize(("selector", "page"), PAIRS)
def test_badge_and_status_colours_meet_wcag_aa(selector, page):
    variables, rules = _rules()
    rule = rules[selector]
    base = rules.get(".badge", {}) if selector.startswith(".badge-") else {}
    merged = base | rule
    foreground = _colour(merged["color"], variables)
    background = _colour(merged.get("background", page or "#ffffff"), variables)
    ratio = contrast(foreground, background)
    assert ratio >= AA_NORMAL_TEXT, f"{selector}: {foreground} on {background} is {ratio:.2f}:1"


def test_a_business_rule_error_is_tied_to_its_input_too(owner_client, catalog):
    # given a form the parser accepts but the service refuses (p95 below the mean)
    response = owner_client.post("/scenarios/new/", form_post(prompt_tokens_p95="10"))
    html = response.content.decode()
    assert response.status_code == 400
    assert '<a href="#id_prompt_tokens_p95"' in html
    tag = re.search(r'<input[^>]*id="id_prompt_tokens_p95"[^>]*>', html).group(0)
    assert "id_prompt_tokens_p95_errors" in tag and 'aria-invalid="true"' in tag
