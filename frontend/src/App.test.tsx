import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter } from "react-router";
import { afterEach, describe, expect, it, vi } from "vitest";
import { App } from "./App";
import { MEMBER, fakeApi } from "./test-utils";

afterEach(() => vi.unstubAllGlobals());

const SINGLE_USER = { mode: "single-user", message: "Single-user mode: every job runs as mia." };
const NO_VCS = { count: 0, next: null, previous: null, results: [] };

function renderApp(url: string) {
  return render(
    <MemoryRouter initialEntries={[url]}>
      <App />
    </MemoryRouter>,
  );
}

describe("the session", () => {
  it("shows who is signed in and how tenants are kept apart, and signs out to the sign-in page", async () => {
    const api = fakeApi({
      "GET /api/v1/auth/session/": { me: MEMBER, tenancy: SINGLE_USER },
      "GET /api/v1/vcs/": NO_VCS,
      "GET /api/v1/me/ssh-keys/": [],
      "POST /api/v1/auth/logout/": [204, null],
    });
    renderApp("/me/ssh-keys");
    expect(await screen.findByRole("note", { name: "Single-user mode" })).toHaveTextContent("every job runs as mia");
    expect(screen.getByText("mia")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Sign out" }));
    expect(await screen.findByRole("form", { name: "Sign in" })).toBeInTheDocument();
    expect(api.calls.some((call) => call.method === "POST" && call.url.pathname === "/api/v1/auth/logout/")).toBe(true);
  });

  it("asks a visitor to sign in, then shows the page asked for with the session the server gives", async () => {
    let signedIn = false;
    fakeApi({
      "GET /api/v1/auth/session/": () => [200, signedIn ? { me: MEMBER, tenancy: SINGLE_USER } : { me: null }],
      "POST /api/v1/auth/login/": () => {
        signedIn = true;
        return [200, MEMBER];
      },
      "GET /api/v1/vcs/": NO_VCS,
      "GET /api/v1/me/ssh-keys/": [],
    });
    renderApp("/me/ssh-keys");
    await userEvent.type(await screen.findByLabelText("Username"), "mia");
    await userEvent.type(screen.getByLabelText("Password"), "secret{Enter}");
    expect(await screen.findByRole("heading", { name: "My SSH keys" })).toBeInTheDocument();
    expect(await screen.findByRole("note", { name: "Single-user mode" })).toBeInTheDocument();
  });
});
