import { fireEvent, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeApi, renderPage } from "../test-utils";
import { AllowedIpsPage } from "./AllowedIps";
import { SshKeysPage } from "./SshKeys";

afterEach(() => vi.unstubAllGlobals());

describe("my SSH keys and allowed IPs", () => {
  it("says there is no key yet, then shows the API's reason a key is refused on its field", async () => {
    fakeApi({
      "GET /api/v1/me/ssh-keys/": [],
      "POST /api/v1/me/ssh-keys/": [400, { public_key: ["Not an OpenSSH public key."] }],
    });
    renderPage(<SshKeysPage />, "/me/ssh-keys");
    expect(await screen.findByText(/No SSH key yet/)).toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("Public key"), { target: { value: "hello" } });
    await userEvent.click(screen.getByRole("button", { name: "Add key" }));
    const message = await screen.findByText("Not an OpenSSH public key.");
    expect(message.closest(".field")).toContainElement(screen.getByLabelText("Public key"));
  });

  it("lists allowed IPs with their expiry and marks the expired ones", async () => {
    fakeApi({
      "GET /api/v1/me/allowed-ips/": [
        { id: 1, network: "203.0.113.0/24", description: "office", created_at: "2026-11-01T00:00:00Z", expires_at: null, expired: false },
        { id: 2, network: "198.51.100.7/32", description: "hotel", created_at: "2026-10-01T00:00:00Z", expires_at: "2026-10-02T00:00:00Z", expired: true },
      ],
    });
    renderPage(<AllowedIpsPage />, "/me/allowed-ips");
    expect(await screen.findByText("203.0.113.0/24")).toBeInTheDocument();
    expect(screen.getByText("never")).toBeInTheDocument();
    expect(screen.getByText(/\(expired\)/).closest("tr")).toHaveClass("expired");
  });

  it("shows a refused address's reason under the address field", async () => {
    fakeApi({
      "GET /api/v1/me/allowed-ips/": [],
      "POST /api/v1/me/allowed-ips/": [400, { address: ["'999.1.1.1' is not an IP address or network."] }],
    });
    renderPage(<AllowedIpsPage />, "/me/allowed-ips");
    await screen.findByText(/No allowed IP yet/);
    await userEvent.type(screen.getByLabelText("Address or network"), "999.1.1.1");
    await userEvent.click(screen.getByRole("button", { name: "Add address" }));
    const message = await screen.findByText(/is not an IP address or network/);
    expect(message.closest(".field")).toContainElement(screen.getByLabelText("Address or network"));
  });
});
