import { fireEvent, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Vc } from "../api";
import { A100, MEMBER, SUMMARY, VISION, currentLocation, fakeApi, renderPage } from "../test-utils";
import { SubmitPage } from "./Submit";
import { defaultChoice } from "./submitModel";

const BASE = {
  "GET /api/v1/vcs/vision/": VISION,
  "GET /api/v1/gpu-types/": [A100],
  "GET /api/v1/cluster/summary/": SUMMARY,
};

afterEach(() => vi.unstubAllGlobals());

/** The form once the VC, its GPU types and the cluster have loaded. */
async function ready() {
  await screen.findByText(/at most 2h 00m/);
  await screen.findByRole("group", { name: "T-shirt sizes" });
  await screen.findByRole("img", { name: /A100 nodes by free GPUs/ });
}

describe("the submit form", () => {
  it("shows the VC's wall-time cap and fills CPUs and memory from a t-shirt size", async () => {
    fakeApi(BASE);
    renderPage(<SubmitPage />, "/submit");
    await ready();
    expect(screen.getByText(/at most 2h 00m \(120 min\) in VC vision/)).toBeInTheDocument();
    expect(screen.getByLabelText("Wall time (minutes)")).toHaveAttribute("max", "120");
    await userEvent.click(screen.getByRole("button", { name: /4 GPU · 32 CPU · 256 GiB/ }));
    expect(screen.getByLabelText("GPUs per worker")).toHaveValue(4);
    expect(screen.getByLabelText("CPUs per worker")).toHaveValue("32");
    expect(screen.getByLabelText("Memory per worker")).toHaveValue("262144");
  });

  it("puts the API's field errors on the fields they are about", async () => {
    const api = fakeApi({
      ...BASE,
      "POST /api/v1/jobs/": [400, { command: ["Give a command to run."], max_wall_time: ["At most 7200 s in VC vision."] }],
    });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    await userEvent.type(screen.getByLabelText("Wall time (minutes)"), "500");
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    expect(await screen.findByText("Give a command to run.")).toBeInTheDocument();
    // In the unit of the field the user filled: minutes, not the API's seconds.
    const wall = screen.getByText("At most 120 min (2h 00m) in VC vision; you asked for 500 min.");
    expect(wall.closest(".field")).toContainElement(screen.getByLabelText("Wall time (minutes)"));
    expect(screen.getByText("Please correct the marked fields.")).toBeInTheDocument();
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ vc: "vision", gpu_type: "A100", max_wall_time: 30000 });
  });

  it("sends the GPU type it shows while the cluster's GPU types have not come in", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/vision/": VISION,
      "GET /api/v1/cluster/summary/": SUMMARY,
      "POST /api/v1/jobs/": [400, { command: ["Give a command to run."] }],
    });
    renderPage(<SubmitPage />, "/submit");
    await screen.findByText(/at most 2h 00m/);
    expect(screen.getByLabelText("GPU type")).toHaveValue("A100");
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    expect(await screen.findByText("Give a command to run.")).toBeInTheDocument();
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ vc: "vision", gpu_type: "A100" });
  });

  it("refuses environment lines that are not KEY=value before sending anything", async () => {
    const api = fakeApi(BASE);
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Environment"), { target: { value: "OK=1\nnot a pair" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    expect(await screen.findByText(/not: not a pair/)).toBeInTheDocument();
    expect(api.calls.some((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/")).toBe(false);
  });

  it("starts a Jupyter interactive job from its preset, its port exposed", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [201, { id: "j-lab" }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    await userEvent.click(screen.getByRole("button", { name: "Jupyter" }));
    expect(screen.getByLabelText("Job type")).toHaveValue("interactive");
    expect(screen.getByLabelText("Ports")).toHaveValue("jupyter=8888");
    // An empty wall time gives the VC's interactive default, and the form says so.
    expect(screen.getByText(/empty: 1h 00m \(60 min\) for an interactive job; at most 2h 00m/)).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs/j-lab"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ type: "interactive", name: "jupyter", ports: [{ name: "jupyter", port: 8888 }] });
    expect(String((posted?.body as { command: string }).command)).toContain("TRAINYARD_ENDPOINT_TOKEN");
  });

  it("refuses ports that are not NAME=PORT before sending", async () => {
    const api = fakeApi(BASE);
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python serve.py" } });
    fireEvent.change(screen.getByLabelText("Ports"), { target: { value: "web:8080" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    expect(await screen.findByText(/not: web:8080/)).toBeInTheDocument();
    expect(api.calls.some((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/")).toBe(false);
  });

  it("submits and goes to the new job's page", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [201, { id: "j-new" }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    fireEvent.change(screen.getByLabelText("Environment"), { target: { value: "EPOCHS=3" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs/j-new"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ command: "python train.py", env: { EPOCHS: "3" }, workers: 1 });
  });

  it("asks for whole nodes and one switch for a job of more than one worker only", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [201, { id: "j-gang" }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    expect(screen.queryByLabelText(/Whole nodes/)).not.toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("Workers"), { target: { value: "4" } });
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "torchrun train.py" } });
    await userEvent.click(screen.getByLabelText(/Whole nodes/));
    await userEvent.click(screen.getByLabelText(/Same network switch/));
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs/j-gang"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ workers: 4, whole_nodes: true, same_switch: true });
  });

  it("sends a deadline as a time, and shows the server's refusal on its field", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [400, { deadline: ["The deadline has passed."] }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    fireEvent.change(screen.getByLabelText("Deadline"), { target: { value: "2026-12-02T09:30" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    const refusal = await screen.findByText("The deadline has passed.");
    expect(refusal.closest(".field")).toContainElement(screen.getByLabelText("Deadline"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ deadline: new Date("2026-12-02T09:30").toISOString() });
  });

  it("sends an elastic range, the throughput and the work with the deadline, and shows a refusal on the deadline", async () => {
    const refusal = "Cannot be met: the earliest finish is 2026-12-02T11:00:00Z.";
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [400, { deadline: [refusal] }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    expect(screen.getByText(/grows into idle GPUs up to its most/)).toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "torchrun train.py" } });
    fireEvent.change(screen.getByLabelText("Fewest workers"), { target: { value: "2" } });
    fireEvent.change(screen.getByLabelText("Most workers"), { target: { value: "4" } });
    fireEvent.change(screen.getByLabelText("Throughput"), { target: { value: "100, 190, 270, 340" } });
    fireEvent.change(screen.getByLabelText("Work (samples)"), { target: { value: "1000000" } });
    fireEvent.change(screen.getByLabelText("Deadline"), { target: { value: "2026-12-02T09:30" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    const shown = await screen.findByText(refusal);
    expect(shown.closest(".field")).toContainElement(screen.getByLabelText("Deadline"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ workers: 4, min_workers: 2, max_workers: 4, throughput: [100, 190, 270, 340], work: 1000000 });
  });

  it("refuses a throughput that is not numbers before sending", async () => {
    const api = fakeApi(BASE);
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    fireEvent.change(screen.getByLabelText("Throughput"), { target: { value: "100, fast" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    const message = await screen.findByText(/not: fast/);
    expect(message.closest(".field")).toContainElement(screen.getByLabelText("Throughput"));
    expect(api.calls.some((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/")).toBe(false);
  });

  it("submits a job array of N tasks and goes to its jobs", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [201, { array: "arr1", size: 3, jobs: ["a", "b", "c"] }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python sweep.py" } });
    fireEvent.change(screen.getByLabelText("Tasks"), { target: { value: "3" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit 3 jobs" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs?array=arr1"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ command: "python sweep.py", array: { count: 3 } });
  });

  it("sends retry_on only when the job retries on any failure", async () => {
    const api = fakeApi({ ...BASE, "POST /api/v1/jobs/": [400, { command: ["Give a command to run."] }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    expect(screen.getByLabelText("Retry on")).toHaveValue("infrastructure");
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await screen.findByText("Give a command to run.");
    fireEvent.change(screen.getByLabelText("Retry on"), { target: { value: "any" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(api.calls.filter((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/")).toHaveLength(2));
    const [first, second] = api.calls.filter((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(first.body).not.toHaveProperty("retry_on");
    expect(second.body).toMatchObject({ retry_on: "any" });
  });

  it("shows an array's refusal on the Tasks field", async () => {
    fakeApi({ ...BASE, "POST /api/v1/jobs/": [400, { array: { count: ["Ensure this value is less than or equal to 10000."] } }] });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python sweep.py" } });
    fireEvent.change(screen.getByLabelText("Tasks"), { target: { value: "20000" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit 20000 jobs" }));
    const message = await screen.findByText("Ensure this value is less than or equal to 10000.");
    expect(message.closest(".field")).toContainElement(screen.getByLabelText("Tasks"));
  });

  it("clones an earlier job into the form", async () => {
    fakeApi({
      ...BASE,
      "GET /api/v1/jobs/j-old/": {
        id: "j-old", name: "resnet", vc: "vision", type: "batch", gpu_type: "A100", workers: 2,
        gpus_per_worker: 4, cpus_per_worker: 32, memory_per_worker: 262144, image: "pytorch:2",
        command: "python resnet.py", env: { LR: "0.1" }, data_path: "/data/imagenet",
        output_path: "/out", preemptible: true, max_retries: 3, max_wall_time: 3600,
      },
    });
    renderPage(<SubmitPage />, "/submit?clone=j-old");
    expect(await screen.findByText("Submit a job (clone of j-old)")).toBeInTheDocument();
    await waitFor(() => expect(screen.getByLabelText("Command")).toHaveValue("python resnet.py"));
    expect(screen.getByLabelText("Workers")).toHaveValue(2);
    expect(screen.getByLabelText("Environment")).toHaveValue("LR=0.1");
    expect(screen.getByLabelText("Max retry count")).toHaveValue(3);
    expect(screen.getByLabelText("Wall time (minutes)")).toHaveValue(60);
  });

  it("says a job can never start when no node could take one of its workers", async () => {
    fakeApi({
      ...BASE,
      "POST /api/v1/jobs/preview/": [400, { gpus_per_worker: ["The largest A100 node has 8 GPUs; a worker asks for 16. Use more workers with fewer GPUs each."] }],
    });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("GPUs per worker"), { target: { value: "16" } });
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    expect(await screen.findByText(/This job can never start: the largest A100 node has 8 GPUs; a worker asks for 16/)).toBeInTheDocument();
    expect(screen.queryByText(/cannot start now/)).not.toBeInTheDocument();
  });

  it("warns, with the server's reason, when the job cannot start now", async () => {
    fakeApi({
      ...BASE,
      "POST /api/v1/jobs/preview/": { can_start_now: false, reason: "needs 2 x 4 A100 on separate nodes; largest free block is 3", estimated_start_at: null },
    });
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    expect(await screen.findByText(/cannot start now: needs 2 x 4 A100 on separate nodes; largest free block is 3/)).toBeInTheDocument();
    expect(screen.getByRole("img", { name: /A100 nodes by free GPUs: 1 with 0 free, 1 with 1 free, 0 with 2 free, 2 with 3 free/ })).toBeInTheDocument();
  });

  it("judges from the fragmentation when the server has no preview", async () => {
    fakeApi(BASE);
    renderPage(<SubmitPage />, "/submit");
    await ready();
    fireEvent.change(screen.getByLabelText("GPUs per worker"), { target: { value: "4" } });
    expect(await screen.findByText(/cannot start now: needs 1 x 4 A100 on free nodes; largest free block is 3/)).toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("GPUs per worker"), { target: { value: "3" } });
    expect(await screen.findByText("Resources are free: this job can start now.")).toBeInTheDocument();
  });
});

const PLATFORM = {
  ...VISION,
  name: "platform",
  resources: [
    {
      gpu_type: "cpu",
      quota: { gpus: 0, cpus: 64, memory: 262144 },
      used: { gpus: 0, cpus: 0, memory: 0 },
      queued: { gpus: 0, cpus: 0, memory: 0 },
      free: { gpus: 0, cpus: 64, memory: 262144 },
      cluster_idle_gpus: 0,
    },
  ],
};
const CPU = { name: "cpu", cpus_per_gpu: 2, memory_per_gpu: 8192 };
const CPU_ROW = {
  gpu_type: "cpu", nodes: 2, schedulable_nodes: 2, gpus_total: 0, gpus_used: 0, gpus_free: 0,
  cpus_total: 128, cpus_used: 0, memory_total: 524288, memory_used: 0, fragmentation: [{ free_gpus: 0, nodes: 2 }],
};
const TWO_VCS = { ...MEMBER, vcs: [{ name: "platform", role: "member" as const }, { name: "vision", role: "member" as const }] };

describe("where the submit form opens", () => {
  it("opens on the VC and GPU type where a job can start now, not on the first VC", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/platform/": PLATFORM,
      "GET /api/v1/vcs/vision/": VISION,
      "GET /api/v1/gpu-types/": [A100, CPU],
      "GET /api/v1/cluster/summary/": { gpu_types: [...SUMMARY.gpu_types, CPU_ROW] },
      "POST /api/v1/jobs/": [201, { id: "j-new" }],
    });
    renderPage(<SubmitPage />, "/submit", "*", TWO_VCS);
    await waitFor(() => expect(screen.getByLabelText("Virtual cluster")).toHaveValue("vision"));
    await screen.findByText(/of 16 A100 GPUs free in its quota/);
    expect(screen.getByLabelText("GPU type")).toHaveValue("A100");
    expect(screen.getByLabelText("GPUs per worker")).toHaveValue(1);
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python train.py" } });
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs/j-new"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ vc: "vision", gpu_type: "A100", gpus_per_worker: 1 });
  });

  it("asks for no GPUs, and hides the field, on a CPU-only type", async () => {
    const api = fakeApi({
      "GET /api/v1/vcs/platform/": PLATFORM,
      "GET /api/v1/gpu-types/": [A100, CPU],
      "GET /api/v1/cluster/summary/": { gpu_types: [CPU_ROW] },
      "POST /api/v1/jobs/": [201, { id: "j-cpu" }],
    });
    renderPage(<SubmitPage />, "/submit", "*", { ...MEMBER, vcs: [{ name: "platform", role: "member" }] });
    await waitFor(() => expect(screen.getByLabelText("GPU type")).toHaveValue("cpu"));
    expect(screen.queryByLabelText("GPUs per worker")).not.toBeInTheDocument();
    fireEvent.change(screen.getByLabelText("Command"), { target: { value: "python etl.py" } });
    expect(await screen.findByText("Resources are free: this job can start now.")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Submit job" }));
    await waitFor(() => expect(currentLocation).toBe("/jobs/j-cpu"));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ vc: "platform", gpu_type: "cpu", gpus_per_worker: 0 });
  });

  it("opens, where nothing can start now, on the most free quota", () => {
    const full = (vc: typeof VISION, free: number) => ({
      ...vc,
      resources: vc.resources.map((row) => ({ ...row, free: { ...row.free, gpus: free } })),
    });
    const busy = { ...SUMMARY.gpu_types[0], gpus_free: 0, fragmentation: [{ free_gpus: 0, nodes: 4 }] };
    const choice = defaultChoice(
      [full({ ...VISION, name: "nlp" }, 2), full(VISION, 6)] as Vc[],
      [A100],
      [busy],
    );
    expect(choice).toEqual({ vc: "vision", gpu_type: "A100" });
  });
});
