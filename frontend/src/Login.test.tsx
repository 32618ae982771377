import { screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { LoginPage } from "./pages/Login";
import { MEMBER, currentLocation, fakeApi, renderPage } from "./test-utils";

afterEach(() => vi.unstubAllGlobals());

describe("signing in", () => {
  it("says when the password is wrong", async () => {
    fakeApi({ "POST /api/v1/auth/login/": [400, { detail: "Wrong username or password, or the account is deactivated." }] });
    const signedIn = vi.fn();
    renderPage(<LoginPage onSignedIn={signedIn} />, "/login");
    await userEvent.type(screen.getByLabelText("Username"), "mia");
    await userEvent.type(screen.getByLabelText("Password"), "nope");
    await userEvent.click(screen.getByRole("button", { name: "Sign in" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("Wrong username or password");
    expect(signedIn).not.toHaveBeenCalled();
  });

  it("goes back to the page that asked for it, submitting with the keyboard", async () => {
    const api = fakeApi({ "POST /api/v1/auth/login/": MEMBER });
    const signedIn = vi.fn();
    renderPage(<LoginPage onSignedIn={signedIn} />, "/login?next=%2Fjobs%3Fstatus%3Drunning", "/login");
    await userEvent.type(screen.getByLabelText("Username"), "mia");
    await userEvent.type(screen.getByLabelText("Password"), "secret{Enter}");
    expect(await screen.findByText("elsewhere")).toBeInTheDocument();
    expect(currentLocation).toBe("/jobs?status=running");
    expect(signedIn).toHaveBeenCalledWith(MEMBER);
    expect(api.calls[0].body).toEqual({ username: "mia", password: "secret" });
  });
});
