import { fireEvent, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { A100, SUMMARY, VISION, currentLocation, fakeApi, renderPage } from "../test-utils";
import { SubmitPage } from "./Submit";

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
    const wall = screen.getByText("At most 7200 s in VC vision.");
    expect(wall.closest(".field")).toContainElement(screen.getByLabelText("Wall time (minutes)"));
    expect(screen.getByText("Please correct the marked fields.")).toBeInTheDocument();
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/");
    expect(posted?.body).toMatchObject({ vc: "vision", gpu_type: "A100", max_wall_time: 30000 });
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
