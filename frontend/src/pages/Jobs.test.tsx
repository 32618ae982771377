import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { currentLocation, fakeApi, renderPage } from "../test-utils";
import { JobsPage } from "./Jobs";

function job(id: string, status: string, extra: object = {}) {
  return {
    id, name: `train-${id}`, owner: "mia", vc: "vision", type: "batch", status, status_message: "",
    image: "", workers: 1, gpu_type: "A100", gpus_per_worker: 2, cpus_per_worker: 16,
    memory_per_worker: 131072, preemptible: false, priority: 0, max_retries: 0, retries_used: 0,
    max_wall_time: 3600, exit_code: null, failure_class: "", estimated_start_at: null,
    submitted_at: "2026-11-29T10:00:00Z", started_at: null, finished_at: null, ...extra,
  };
}

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe("the jobs table", () => {
  it("asks the API with the filters in the page's URL and shows each job with its badge", async () => {
    const api = fakeApi({
      "GET /api/v1/jobs/": { count: 2, next: null, previous: null, results: [job("a1", "running"), job("b2", "queued")] },
    });
    renderPage(<JobsPage />, "/jobs?vc=vision&status=running&owner=mia");
    const table = await screen.findByRole("table", { name: "Jobs" });
    expect(within(table).getByRole("link", { name: "a1" })).toHaveAttribute("href", "/jobs/a1");
    expect(within(table).getByText("running")).toHaveClass("badge");
    const query = api.calls[0].url.searchParams;
    expect([query.get("vc"), query.get("status"), query.get("owner")]).toEqual(["vision", "running", "mia"]);
  });

  it("shows the time left before a running job's wall-time limit", async () => {
    const startedAt = new Date(Date.now() - 20 * 60 * 1000).toISOString();
    fakeApi({
      "GET /api/v1/jobs/": { count: 1, next: null, previous: null, results: [job("a1", "running", { started_at: startedAt })] },
    });
    renderPage(<JobsPage />, "/jobs");
    const row = (await screen.findByRole("link", { name: "a1" })).closest("tr")!;
    expect(within(row).getByText(/^(39m 5\ds|40m 00s)$/)).toBeInTheDocument();
  });

  it("changing a filter changes the URL, so the view can be shared", async () => {
    fakeApi({ "GET /api/v1/jobs/": { count: 0, next: null, previous: null, results: [] } });
    renderPage(<JobsPage />, "/jobs?page=3");
    expect(await screen.findByText(/No jobs match/)).toBeInTheDocument();
    await userEvent.selectOptions(screen.getByLabelText("Status"), "failed");
    await waitFor(() => expect(currentLocation).toBe("/jobs?status=failed"));
  });

  it("kills the selected jobs in one request and shows each one's result", async () => {
    const api = fakeApi({
      "GET /api/v1/jobs/": { count: 3, next: null, previous: null, results: [job("a1", "running"), job("b2", "finished"), job("c3", "queued")] },
      "POST /api/v1/jobs/batch/": {
        action: "kill",
        results: [
          { id: "a1", ok: true, status: "killing" },
          { id: "b2", ok: false, error: "A finished job cannot be killed." },
        ],
      },
    });
    renderPage(<JobsPage />, "/jobs");
    await userEvent.click(await screen.findByLabelText("Select job a1"));
    await userEvent.click(screen.getByLabelText("Select job b2"));
    expect(screen.getByText("2 selected")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Kill" }));
    const results = await screen.findByRole("status", { name: "Results" });
    expect(within(results).getByText("a1: ok, now killing")).toHaveClass("ok");
    expect(within(results).getByText("b2: A finished job cannot be killed.")).toHaveClass("failed");
    const batch = api.calls.find((call) => call.url.pathname === "/api/v1/jobs/batch/");
    expect(batch?.body).toEqual({ action: "kill", ids: ["a1", "b2"] });
  });

  it("pages through the jobs", async () => {
    const api = fakeApi({ "GET /api/v1/jobs/": { count: 120, next: "x", previous: null, results: [job("a1", "queued")] } });
    renderPage(<JobsPage />, "/jobs");
    expect(await screen.findByText("Page 1 of 3 · 120 jobs")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Next" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs?page=2"));
    await waitFor(() => expect(api.calls.at(-1)?.url.searchParams.get("page")).toBe("2"));
  });

  it("gathers an array's tasks under one row, which opens to show them", async () => {
    fakeApi({
      "GET /api/v1/jobs/": {
        count: 4, next: null, previous: null,
        results: [
          job("t1", "running", { array: "arr1", array_index: 0 }),
          job("s1", "queued"),
          job("t2", "queued", { array: "arr1", array_index: 1 }),
          job("t3", "running", { array: "arr1", array_index: 2 }),
        ],
      },
    });
    renderPage(<JobsPage />, "/jobs");
    const table = await screen.findByRole("table", { name: "Jobs" });
    const group = within(table).getByRole("link", { name: "array arr1" }).closest("tr")!;
    expect(within(group).getByText("2 running, 1 queued")).toBeInTheDocument();
    expect(within(table).getByRole("link", { name: "s1" })).toBeInTheDocument();
    expect(within(table).queryByRole("link", { name: "t2" })).not.toBeInTheDocument();
    await userEvent.click(within(group).getByRole("button", { name: "Show the tasks of array arr1" }));
    expect(within(table).getByRole("link", { name: "t2" })).toBeInTheDocument();
  });

  it("lists one array's tasks and kills the array in one request", async () => {
    const api = fakeApi({
      "GET /api/v1/jobs/": { count: 1, next: null, previous: null, results: [job("t1", "running", { array: "arr1", array_index: 0 })] },
      "POST /api/v1/job-arrays/arr1/kill/": { array: "arr1", action: "kill", changed: 1 },
    });
    renderPage(<JobsPage />, "/jobs?array=arr1");
    expect(await screen.findByRole("link", { name: "t1" })).toBeInTheDocument();
    expect(api.calls[0].url.searchParams.get("array")).toBe("arr1");
    await userEvent.click(screen.getByRole("button", { name: "Kill array" }));
    const results = await screen.findByRole("status", { name: "Results" });
    expect(within(results).getByText("arr1: ok, now 1 jobs changed")).toBeInTheDocument();
  });
});
