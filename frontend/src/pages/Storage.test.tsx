import { screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeApi, renderPage } from "../test-utils";
import { StoragePage } from "./Storage";

afterEach(() => vi.unstubAllGlobals());

const GIB = 1024 ** 3;
const page = <T,>(results: T[]) => ({ count: results.length, next: null, previous: null, results });
const scan = (id: number, finished: string, status = "done") => ({
  id, root: "home", status, started_at: finished, finished_at: status === "done" ? finished : null,
  files_seen: 1200, bytes_seen: 30 * GIB, error: "",
});
const usage = (key: string, bytes: number) => ({
  snapshot_at: "2026-12-01T08:00:00Z", kind: "user", key, user: key, vc: null, bytes, files: 10,
});

describe("the storage tab", () => {
  it("shows the snapshot time, usage with its change since the previous snapshot, and the CSV", async () => {
    fakeApi({
      "GET /api/v1/storage/roots/": [{ name: "home", path: "/nfs/home", kind: "nfs", expiry_days: 90, warn_days: 7 }],
      "GET /api/v1/storage/scans/": page([scan(9, "2026-12-01T08:00:00Z", "running"), scan(8, "2026-12-01T08:00:00Z"), scan(7, "2026-11-30T08:00:00Z")]),
      "GET /api/v1/storage/usage/": (_body: unknown, url: URL) => {
        if (url.searchParams.get("kind") === "vc") return [200, page([])];
        return [200, page(url.searchParams.get("scan") === "8" ? [usage("mia", 12 * GIB)] : [usage("mia", 10 * GIB)])];
      },
      "GET /api/v1/storage/largest-paths/": page([{ path: "mia/ckpt/epoch-90.pt", bytes: 8 * GIB, user: "mia" }]),
      "GET /api/v1/storage/expiry-runs/": page([{ id: 3, status: "done", started_at: "2026-12-01T07:00:00Z", expire_before: "2026-09-01T07:00:00Z" }]),
      "GET /api/v1/storage/expiring-files/": page([
        { report_at: "2026-12-01T07:00:00Z", path: "mia/old.tar", bytes: GIB, last_used_at: "2026-08-01T00:00:00Z", expires_at: "2026-10-30T00:00:00Z", expired: true, user: "mia" },
      ]),
    });
    renderPage(<StoragePage />, "/storage");
    const snapshot = await screen.findByLabelText("Snapshot");
    await within(snapshot).findByText("snapshot taken", { exact: false });
    expect(snapshot).toHaveTextContent(new Date("2026-12-01T08:00:00Z").toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" }));
    expect(snapshot).toHaveTextContent("scanning now: 1,200 files");
    const byUser = await screen.findByRole("table", { name: "Usage by user" });
    const [row, total] = await within(byUser).findAllByText("+2 GiB");
    expect(row.closest("tr")).toHaveTextContent("mia12 GiB10+2 GiB");
    expect(total.closest("tr")).toHaveTextContent("Total12 GiB");
    expect(screen.getByRole("link", { name: "Download CSV" })).toHaveAttribute("href", "/api/v1/storage/usage/export/?root=home");
    expect(await screen.findByRole("table", { name: "Largest paths" })).toHaveTextContent("mia/ckpt/epoch-90.pt");
    expect(await screen.findByRole("table", { name: "Files that would expire" })).toHaveTextContent("now (expired)");
    expect(screen.queryByRole("button", { name: "Scan now" })).not.toBeInTheDocument(); // admins only
  });
});
