"""Settings shared by the browser tests."""

from playwright.sync_api import expect

# A page's answer can take seconds when three test processes share two cores; a user would
# wait that long too. Playwright's default of 5 s is for a quiet machine.
expect.set_options(timeout=20_000)
