"""The e2e tests' browser (one per module) and page (one per test, no script error allowed)."""

import pytest
from tbutil import chromium, new_page


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser):
    pg = new_page(browser)
    yield pg
    pg.close()
    assert not pg.errors, pg.errors
