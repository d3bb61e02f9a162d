"""/docs and /redoc load every asset from the service itself, never from a CDN."""

import re
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import DOCS_STATIC
from judge.config import EMBEDDED_JUDGE
from judge.engine import Grader
from judge.providers.fake import FakeProvider

KEY = "docs-key-0123456789"
# Every URL a page loads: src/href attributes and the spec URL handed to the JS.
URL = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url:\s*'([^']+)'""")


@pytest.fixture
def http(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Iterator[TestClient]:
    grader = make_grader(FakeProvider(outputs=[]), metrics=("rouge_l",), cache=False)
    with TestClient(make_app(grader, api_keys=[KEY])) as client:
        yield client


def urls_of(html: str) -> list[str]:
    return [a or b for a, b in URL.findall(html)]


@pytest.mark.parametrize(
    ("page", "assets"),
    [("/docs", {"swagger-ui-bundle.js": "javascript", "swagger-ui.css": "text/css"}),
     ("/redoc", {"redoc.standalone.js": "javascript"})],
)
def test_pages_load_only_local_assets(
    http: TestClient, page: str, assets: dict[str, str]
) -> None:
    # No API key: the pages were public before they were served offline, like /openapi.json.
    response = http.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "cdn." not in html and "fonts.googleapis" not in html
    assert "tiangolo.com" not in html  # FastAPI's default favicon
    found = urls_of(html)
    assert "/openapi.json" in found
    for name in assets:
        assert f"{DOCS_STATIC}/{name}" in found, (name, found)
    assert f"{DOCS_STATIC}/favicon.png" in found
    for url in found:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, url  # same host, same scheme
        assert url.startswith("/"), url
        asset = http.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url
        name = url.rsplit("/", 1)[-1]
        if name in assets:
            assert assets[name] in asset.headers["content-type"], (url, asset.headers)
            assert len(asset.content) > 100_000, url  # the real bundle, not a stub
        elif name == "favicon.png":
            assert asset.headers["content-type"] == "image/png"
            assert asset.content.startswith(b"\x89PNG")


def test_assets_do_not_fetch_fonts_or_scripts_from_elsewhere(http: TestClient) -> None:
    css = http.get(f"{DOCS_STATIC}/swagger-ui.css").text
    # A stylesheet pulling a remote font or sheet would still reach for the network.
    assert not re.search(r"@import|url\(\s*['\"]?https?://", css)


def test_docs_are_public_and_the_api_is_not(http: TestClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json", f"{DOCS_STATIC}/swagger-ui.css"):
        assert http.get(path).status_code == 200, path
    assert http.get("/v1/rubrics").status_code == 401
    assert http.get("/v1/rubrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_missing_asset_is_a_uniform_404(http: TestClient) -> None:
    for path in (f"{DOCS_STATIC}/nope.js", f"{DOCS_STATIC}/../app.py"):
        response = http.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["type"] == "not_found"


def test_pages_are_not_in_the_openapi_spec(http: TestClient) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    assert not {"/docs", "/redoc"} & set(paths)
    assert not any(p.startswith("/static") for p in paths)


def test_urls_follow_the_root_path(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    grader = make_grader(
        FakeProvider(outputs=[]), model=EMBEDDED_JUDGE, metrics=("rouge_l",), cache=False
    )
    app = make_app(grader)
    # A proxy serving the app under /judge sets root_path; every URL of the page needs it.
    with TestClient(app, root_path="/judge") as client:
        for page in ("/docs", "/redoc"):
            found = urls_of(client.get(page).text)
            assert found and all(url.startswith("/judge/") for url in found), found
