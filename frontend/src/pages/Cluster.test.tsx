import { screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeApi, renderPage } from "../test-utils";
import { ClusterPage } from "./Cluster";

afterEach(() => vi.unstubAllGlobals());

describe("the cluster page", () => {
  it("counts the worker nodes of a CPU-only cluster and lists each node's state and VC", async () => {
    fakeApi({
      "GET /api/v1/cluster/summary/": {
        gpu_types: [
          {
            gpu_type: "cpu", nodes: 2, schedulable_nodes: 1, gpus_total: 0, gpus_used: 0, gpus_free: 0,
            cpus_total: 64, cpus_used: 6, memory_total: 262144, memory_used: 16384,
            fragmentation: [{ free_gpus: 0, nodes: 1 }],
          },
        ],
        tenancy: { mode: "single-user", message: "Single-user mode: the portal does not run as root, so every job runs as its account mia (uid 1000)." },
      },
      "GET /api/v1/nodes/": {
        count: 2, next: null, previous: null,
        results: [
          { name: "cpu-1", gpu_type: "cpu", gpus: 0, cpus: 32, memory: 131072, schedulable: true, repair_state: "in_service", ready: true, ready_reason: "", last_heartbeat: null, gpus_free: 0 },
          { name: "cpu-2", gpu_type: "cpu", gpus: 0, cpus: 32, memory: 131072, schedulable: false, repair_state: "in_repair", ready: false, ready_reason: "disk full", last_heartbeat: null, gpus_free: 0, dedicated_vc: "nlp", switch: "ib-leaf-1" },
        ],
      },
      "GET /api/v1/cluster/vc-usage/": { vcs: [{ vc: "vision", gpu_type: "cpu", quota_gpus: 0, used_gpus: 0, queued_gpus: 0 }] },
    });
    renderPage(<ClusterPage />, "/cluster");
    expect(await screen.findByLabelText("Tenant isolation")).toHaveTextContent(
      "Single-user mode: the portal does not run as root",
    );
    const types = await screen.findByRole("table", { name: "GPU types" });
    const row = within(types).getByText("cpu").closest("tr")!;
    expect(within(row).getAllByRole("cell").map((cell) => cell.textContent)).toEqual([
      "cpu", "2", "1", "0", "0", "0", "6 / 64", "16 GiB / 256 GiB",
    ]);
    expect(screen.queryByRole("img", { name: /nodes by free GPUs/ })).not.toBeInTheDocument();
    const nodes = await screen.findByRole("table", { name: "Nodes" });
    const broken = within(nodes).getByText("cpu-2").closest("tr")!;
    expect(broken).toHaveTextContent("cordoned");
    expect(broken).toHaveTextContent("in repair");
    expect(broken).toHaveTextContent("not ready: disk full");
    expect(broken).toHaveTextContent("VC nlp");
    expect(broken).toHaveTextContent("ib-leaf-1");
    expect(within(nodes).getByText("cpu-1").closest("tr")!).toHaveTextContent("shared");
    expect(await screen.findByRole("table", { name: "Per-VC usage" })).toHaveTextContent("vision");
  });
});
