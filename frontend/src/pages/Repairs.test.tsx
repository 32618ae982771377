import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEMBER, fakeApi, renderPage } from "../test-utils";
import { RepairsPage } from "./Repairs";

afterEach(() => vi.unstubAllGlobals());

const ADMIN = { ...MEMBER, username: "root", is_cluster_admin: true, vcs: [] };
const page = <T,>(results: T[]) => ({ count: results.length, next: null, previous: null, results });
const ecc = {
  id: 1, node: "a100-2", rule: "ecc-double-bit", fault: "double-bit ECC error", detail: "GPU 3", severity: "critical",
  action: "migrate", first_seen: "2026-12-01T08:00:00Z", fired_at: "2026-12-01T08:00:00Z", open: true, held_back: false,
  outcome: "taken out of the pool; its jobs moved to healthy nodes at once",
};
const held = { ...ecc, id: 2, node: "a100-3", held_back: true, outcome: "held back, the node stays in service: safety valve: 1 of 6 nodes already out of service" };

describe("the node repair page", () => {
  it("shows states, faults, what the safety valve holds back and the history, and moves a node", async () => {
    let state = "out_of_pool";
    const api = fakeApi({
      "GET /api/v1/node-repairs/": () => [200, page([
        { name: "a100-2", repair_state: state, next_states: state === "out_of_pool" ? ["ready_for_repair"] : ["in_repair"], schedulable: false, ready: true, ready_reason: "", open_faults: [ecc] },
        { name: "a100-3", repair_state: "in_service", next_states: ["out_of_pool"], schedulable: true, ready: true, ready_reason: "", open_faults: [held] },
      ])],
      "GET /api/v1/node-faults/": page([ecc, held]),
      "GET /api/v1/node-repairs/a100-2/": {
        name: "a100-2", repair_state: state, next_states: [], schedulable: false, ready: true, ready_reason: "", open_faults: [],
        history: [{ from_state: "in_service", to_state: "out_of_pool", reason: "double-bit ECC error on GPU 3 (rule ecc-double-bit)", rule: "ecc-double-bit", actor: "repairmanager", created_at: "2026-12-01T08:00:00Z" }],
      },
      "POST /api/v1/node-repairs/a100-2/move/": (body: unknown) => {
        state = (body as { to_state: string }).to_state;
        return [200, { name: "a100-2", repair_state: state }];
      },
    });
    renderPage(<RepairsPage />, "/repairs", "*", ADMIN);
    expect(await screen.findByLabelText("Nodes by repair state")).toHaveTextContent("2 nodes: 1 in service, 1 out of pool");
    expect(screen.getByRole("table", { name: "Held back" })).toHaveTextContent("a100-3");
    const table = screen.getByRole("table", { name: "Repair state" });
    const row = within(table).getByText("a100-2").closest("tr")!;
    expect(row).toHaveTextContent("double-bit ECC error on GPU 3");
    await userEvent.click(within(row).getByRole("button", { name: "History" }));
    expect(await screen.findByRole("table", { name: "History of a100-2" })).toHaveTextContent("rule ecc-double-bit");
    await userEvent.type(within(row).getByLabelText("Reason for moving a100-2"), "drained by hand");
    await userEvent.click(within(row).getByRole("button", { name: "Move" }));
    expect(await within(row).findByText("Moved to ready for repair.")).toBeInTheDocument();
    const moved = api.calls.find((call) => call.method === "POST");
    expect(moved?.body).toEqual({ to_state: "ready_for_repair", reason: "drained by hand" });
  });

  it("tells a member the page is for cluster admins", () => {
    fakeApi({});
    renderPage(<RepairsPage />, "/repairs");
    expect(screen.getByRole("alert")).toHaveTextContent("Only cluster admins");
  });
});
