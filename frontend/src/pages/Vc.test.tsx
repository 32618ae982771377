import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEMBER, VISION, fakeApi, renderPage } from "../test-utils";
import { VcPage } from "./Vc";

const ADMIN = { ...MEMBER, username: "vera", vcs: [{ name: "vision", role: "admin" as const }] };

afterEach(() => vi.unstubAllGlobals());

describe("the VC page", () => {
  it("shows quota against use and queued demand, and the queue in order", async () => {
    fakeApi({
      "GET /api/v1/vcs/vision/": VISION,
      "GET /api/v1/vcs/vision/queue/": [
        { position: 1, job_id: "q1", name: "big", owner: "mia", gpu_type: "A100", workers: 2, gpus_per_worker: 8, priority: 0, submitted_at: "2026-11-29T10:00:00Z", status: "queued", status_message: "waits for 16 A100 GPUs", estimated_start_at: null },
      ],
    });
    renderPage(<VcPage tab="overview" />, "/vcs/vision", "/vcs/:name");
    expect(await screen.findByRole("img", { name: "12 of 16 used" })).toBeInTheDocument();
    expect(await screen.findByText("waits for 16 A100 GPUs")).toBeInTheDocument();
    expect(screen.queryByRole("link", { name: "Settings" })).not.toBeInTheDocument();
  });

  it("shows the share of the VC's deadlines met as a figure", async () => {
    fakeApi({
      "GET /api/v1/vcs/vision/": VISION,
      "GET /api/v1/vcs/vision/queue/": [],
      "GET /api/v1/vcs/vision/deadlines/": { since: "2026-11-26T10:00:00Z", ended: 4, met: 3, met_rate: 0.75, pending: 2, predicted_late: 1 },
    });
    renderPage(<VcPage tab="overview" />, "/vcs/vision", "/vcs/:name");
    expect(await screen.findByRole("img", { name: "75% of deadlines met" })).toBeInTheDocument();
    expect(screen.getByLabelText("Deadlines met")).toHaveTextContent(
      "3 of 4 jobs with a deadline met it in the last 7 days (75%); 2 still ahead, 1 predicted late.",
    );
  });

  it("refuses the settings tab to a member", async () => {
    fakeApi({ "GET /api/v1/vcs/vision/": VISION });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings");
    expect(await screen.findByText(/Only admins of VC vision can change its settings/)).toBeInTheDocument();
    expect(screen.queryByRole("form", { name: "VC settings" })).not.toBeInTheDocument();
  });

  it("lets a VC admin change the policy and max job time, and shows a refused value on its field", async () => {
    let patches = 0;
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin" },
      "GET /api/v1/vcs/vision/members/": [{ username: "vera", email: "", role: "admin" }],
      "PATCH /api/v1/vcs/vision/": (body: unknown) =>
        ++patches === 1
          ? [400, { max_wall_time: ["Ensure this value is greater than or equal to 60."] }]
          : [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const hours = await screen.findByLabelText("Max job time (hours)");
    await userEvent.selectOptions(screen.getByLabelText("Scheduling policy"), "RF");
    await userEvent.clear(hours);
    await userEvent.type(hours, "0.001");
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    const refusal = await screen.findByText("Ensure this value is greater than or equal to 60.");
    expect(refusal.closest(".field")).toContainElement(hours);
    await userEvent.clear(hours);
    await userEvent.type(hours, "4");
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    expect(await screen.findByText("Saved: policy RF, jobs run at most 4h 00m.")).toBeInTheDocument();
    await waitFor(() => expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({ policy: "RF", max_wall_time: 14400 }));
  });
});

describe("the idle watch settings", () => {
  it("lets a VC admin turn the idle watch on, and off for interactive jobs", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin", idle_util_percent: 5, idle_warn_minutes: null, idle_kill_minutes: 60, interactive_idle_warn_minutes: 240, interactive_idle_kill_minutes: 240 },
      "GET /api/v1/vcs/vision/members/": [],
      "PATCH /api/v1/vcs/vision/": (body: unknown) => [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const warn = await screen.findByLabelText("Warn after (minutes)");
    expect(warn).toHaveValue(null); // off
    await userEvent.type(warn, "90");
    await userEvent.clear(screen.getByLabelText("Interactive: warn after (minutes)"));
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    await waitFor(() =>
      expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({
        idle_util_percent: 5, idle_warn_minutes: 90, idle_kill_minutes: 60, interactive_idle_warn_minutes: null,
      }),
    );
  });
});

describe("lending dedicated nodes", () => {
  it("lets a VC admin lend the VC's dedicated nodes to other VCs' preemptible jobs", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin", lends_dedicated_nodes: false },
      "GET /api/v1/vcs/vision/members/": [],
      "PATCH /api/v1/vcs/vision/": (body: unknown) => [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const lend = await screen.findByLabelText("Lend the nodes dedicated to this VC");
    expect(lend).not.toBeChecked();
    await userEvent.click(lend);
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    await waitFor(() =>
      expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({ lends_dedicated_nodes: true }),
    );
  });
});

describe("whole nodes for distributed jobs", () => {
  it("lets a VC admin give every job of more than one worker whole nodes", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin", whole_nodes_for_distributed: false },
      "GET /api/v1/vcs/vision/members/": [],
      "PATCH /api/v1/vcs/vision/": (body: unknown) => [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const whole = await screen.findByLabelText("Whole nodes for distributed jobs");
    expect(whole).not.toBeChecked();
    await userEvent.click(whole);
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    await waitFor(() =>
      expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({ whole_nodes_for_distributed: true }),
    );
  });
});

describe("the fair-share half-life", () => {
  it("shows the VC's half-life and sends the one a VC admin types", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin", policy: "FS", usage_half_life_hours: 168 },
      "GET /api/v1/vcs/vision/members/": [],
      "PATCH /api/v1/vcs/vision/": (body: unknown) => [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const halfLife = await screen.findByLabelText("Fair-share half-life (hours)");
    expect(halfLife).toHaveValue(168);
    await userEvent.clear(halfLife);
    await userEvent.type(halfLife, "24");
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    await waitFor(() =>
      expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({ usage_half_life_hours: 24 }),
    );
  });

  it("lets a VC admin refuse jobs whose deadlines cannot be met", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": { ...VISION, my_role: "admin", infeasible_deadlines: "flag" },
      "GET /api/v1/vcs/vision/members/": [],
      "PATCH /api/v1/vcs/vision/": (body: unknown) => [200, { ...VISION, ...(body as object) }],
    });
    renderPage(<VcPage tab="settings" />, "/vcs/vision/settings", "/vcs/:name/settings", ADMIN);
    const choice = await screen.findByLabelText("Infeasible deadlines");
    expect(choice).toHaveValue("flag");
    await userEvent.selectOptions(choice, "refuse");
    await userEvent.click(screen.getByRole("button", { name: "Save settings" }));
    await waitFor(() =>
      expect(api.calls.filter((c) => c.method === "PATCH").at(-1)?.body).toMatchObject({ infeasible_deadlines: "refuse" }),
    );
  });
});
