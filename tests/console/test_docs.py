"""/docs in a real Chromium: Swagger UI from the package (nothing from another host) and,
with LEASEHOLD_API_KEYS set, a key asked for and sent on the spec's fetch and "Try it out"."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import BrowserContext, Route, expect

from tests.support.processes import Processes

KEY = "docs-key-0123456789abcdef"


def test_docs_work_offline_with_a_key_entered_on_the_page(
    processes: Processes, context: BrowserContext
) -> None:
    _, url = processes.api(LEASEHOLD_API_KEYS=KEY)
    api_host = urlsplit(url).netloc
    elsewhere: list[str] = []

    def offline(route: Route) -> None:
        """The machine has no internet: any other host is refused, and noted."""
        if urlsplit(route.request.url).netloc == api_host:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", offline)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{url}/docs")
    form = page.locator("#key-form")
    expect(form).to_contain_text("This API needs a key")
    page.get_by_label("API key").fill("not-the-key-0123456789")
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_role("alert")).to_have_text("the API refused this key")
    page.get_by_label("API key").fill(KEY)
    with page.expect_request(lambda request: request.url.endswith("/openapi.json")) as spec:
        page.get_by_role("button", name="Use this key").click()
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Leasehold")
    assert spec.value.headers["authorization"] == f"Bearer {KEY}"
    # "Try it out" on GET /handlers: the call carries the key and gets 200
    operation = page.locator("#operations-system-list_handlers_handlers_get")
    if operation.count() == 0:
        operation = page.locator(".opblock-get", has_text="/handlers").first
    operation.locator(".opblock-summary").first.click()
    page.get_by_role("button", name="Try it out").click()
    with page.expect_response(lambda response: response.url.endswith("/handlers")) as answer:
        page.get_by_role("button", name="Execute").click()
    assert answer.value.status == 200
    assert answer.value.request.headers["authorization"] == f"Bearer {KEY}"
    assert elsewhere == []
    assert errors == []
