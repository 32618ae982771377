import { screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeApi, renderPage } from "../test-utils";
import { monthRange, UsagePage } from "./Usage";

afterEach(() => vi.unstubAllGlobals());

const row = (key: string, booked: number, idle: number | null, bucket?: string) => ({
  key, bucket, booked_gpu_hours: booked, used_gpu_hours: idle === null ? null : booked - idle,
  idle_gpu_hours: idle, borrowed_gpu_hours: 0,
  used_unavailable_reason: idle === null ? "no metrics source is configured" : "",
});

describe("the usage page", () => {
  it("charts the month per day by VC, booked vs idle per user, and the table with its CSV", async () => {
    const api = fakeApi({
      "GET /api/v1/usage/gpu-hours/": (_body: unknown, url: URL) => {
        if (url.searchParams.get("bucket") === "day") {
          return [200, { results: [row("vision", 48, 0, "2026-11-03"), row("nlp", 8, 0, "2026-11-03"), row("vision", 24, 0, "2026-11-04")] }];
        }
        return [200, { results: [row("mia", 72, 30), row("otto", 8, null)] }];
      },
    });
    renderPage(<UsagePage />, "/usage?month=2026-11");

    const daily = await screen.findByRole("img", { name: /Booked GPU-hours per day in 2026-11 by VC/ });
    expect(daily).toHaveAccessibleName("Booked GPU-hours per day in 2026-11 by VC: nlp 8, vision 72");
    expect(screen.getByRole("img", { name: "Booked and idle GPU-hours per user in 2026-11" })).toHaveTextContent("72 booked, 30 idle");
    const table = screen.getByRole("table", { name: "GPU-hours per user" });
    expect(within(table).getByText("mia").closest("tr")).toHaveTextContent("mia7242300"); // 72 booked, 42 used, 30 idle, 0 borrowed
    expect(within(table).getByText("otto").closest("tr")).toHaveTextContent("otto8——0");
    expect(screen.getByText(/unknown where shown/)).toHaveTextContent("no metrics source is configured");
    const { since, until } = monthRange("2026-11");
    expect(since).toBe("2026-11-01T00:00:00.000Z");
    expect(until).toBe("2026-12-01T00:00:00.000Z");
    const csv = screen.getByRole("link", { name: "Download CSV" });
    expect(csv.getAttribute("href")).toBe(
      `/api/v1/usage/gpu-hours/export/?group_by=user&since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}`,
    );
    const asked = api.calls.map((call) => call.url.searchParams.get("group_by"));
    expect(asked.sort()).toEqual(["user", "vc"]);
  });

  it("inside a VC, charts by user", async () => {
    const api = fakeApi({ "GET /api/v1/usage/gpu-hours/": { results: [row("mia", 5, 1, "2026-11-03")] } });
    renderPage(<UsagePage />, "/usage?month=2026-11&vc=vision");
    await screen.findByRole("img", { name: /by user: mia 5/ });
    expect(api.calls.every((call) => call.url.searchParams.get("vc") === "vision")).toBe(true);
  });
});
