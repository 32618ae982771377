import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { MEMBER, fakeApi, renderPage } from "../test-utils";
import { JobDetailPage } from "./JobDetail";

const FAILED = {
  id: "f1", name: "bert", owner: "mia", vc: "vision", type: "batch", status: "failed",
  status_message: "Failed: exit code 1 (user error: python-syntax-error).",
  insight_message: "", repair_message: "Node a100-2 was drained for repair after this attempt.",
  image: "", command: "python bert.py", env: {}, workers: 1, gpu_type: "A100", gpus_per_worker: 1,
  cpus_per_worker: 8, memory_per_worker: 65536, preemptible: false, priority: 0, max_retries: 2,
  retry_on: "infrastructure", retries_used: 1, max_wall_time: 3600, exit_code: 1, failure_class: "user",
  failure_rule: "python-syntax-error", attempt: 2, estimated_start_at: null,
  submitted_at: "2026-11-29T10:00:00Z", started_at: "2026-11-29T10:00:05Z",
  finished_at: "2026-11-29T10:01:00Z", endpoints: {},
  run_as: "ty-mia (uid 30001, gid 30001)",
  limits: "setrlimit: each process's memory (RLIMIT_DATA) is capped at its worker's; CPU is not limited",
};

afterEach(() => vi.unstubAllGlobals());

describe("a job's page", () => {
  it("shows why it failed, the repair note and each attempt with its failure class", async () => {
    fakeApi({
      "GET /api/v1/jobs/f1/": FAILED,
      "GET /api/v1/jobs/f1/events/": [
        { from_status: "", to_status: "queued", actor: "mia", reason: "submitted", created_at: "2026-11-29T10:00:00Z" },
        { from_status: "running", to_status: "failed", actor: "trainyard", reason: "exit code 1", created_at: "2026-11-29T10:01:00Z" },
      ],
      "GET /api/v1/jobs/f1/attempts/": [
        { number: 1, started_at: "2026-11-29T10:00:05Z", ended_at: "2026-11-29T10:00:30Z", nodes: ["a100-2"], exit_code: 137, failure_class: "infrastructure", failure_rule: "xid-79", message: "GPU fell off the bus" },
        { number: 2, started_at: "2026-11-29T10:00:40Z", ended_at: "2026-11-29T10:01:00Z", nodes: ["a100-3"], exit_code: 1, failure_class: "user", failure_rule: "python-syntax-error", message: "" },
      ],
      "GET /api/v1/jobs/f1/log/tail/": { text: "SyntaxError: invalid syntax\n", next_offset: 28, size: 28, complete: true },
    });
    renderPage(<JobDetailPage />, "/jobs/f1", "/jobs/:id");
    expect(await screen.findByLabelText("Status message")).toHaveTextContent("python-syntax-error");
    expect(screen.getByLabelText("Repair message")).toHaveTextContent("drained for repair");
    const spec = screen.getByLabelText("Spec");
    expect(within(spec).getByText("Runs as").nextSibling).toHaveTextContent("ty-mia (uid 30001, gid 30001)");
    expect(within(spec).getByText("Limits").nextSibling).toHaveTextContent("RLIMIT_DATA");
    expect(within(spec).getByText("Retries").nextSibling).toHaveTextContent("1 of 2 used, on infrastructure failures");
    const attempts = await screen.findByRole("table", { name: "Attempts" });
    expect(within(attempts).getByText("infrastructure (xid-79)")).toBeInTheDocument();
    expect(within(attempts).getByText("user (python-syntax-error)")).toBeInTheDocument();
    // The log arrives after the page: wait for its text, as a reader would.
    await waitFor(() => expect(screen.getByLabelText("Log")).toHaveTextContent("SyntaxError: invalid syntax"));
    expect(screen.getByRole("link", { name: "Download full log" })).toHaveAttribute("href", "/api/v1/jobs/f1/log/");
    expect(screen.getByRole("link", { name: "Clone" })).toHaveAttribute("href", "/submit?clone=f1");
    expect(screen.queryByLabelText("Endpoints")).not.toBeInTheDocument();
  });

  it("says plainly that a job does not exist, without a Retry that cannot help", async () => {
    fakeApi({ "GET /api/v1/jobs/nope/": [404, { detail: "No Job matches the given query." }] });
    renderPage(<JobDetailPage />, "/jobs/nope", "/jobs/:id");
    expect(await screen.findByRole("heading", { name: "No job nope" })).toBeInTheDocument();
    expect(screen.getByRole("alert")).toHaveTextContent("There is no job nope that you may see");
    expect(screen.getByRole("link", { name: "its tasks" })).toHaveAttribute("href", "/jobs?array=nope");
    expect(screen.queryByText("No Job matches the given query.")).not.toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Retry" })).not.toBeInTheDocument();
  });

  it("lets a VC admin change a queued job's wall time and retries, and shows the refusal on its field", async () => {
    const queued = { ...FAILED, id: "q1", status: "queued", exit_code: null, failure_class: "", finished_at: null, started_at: null, max_wall_time: 7200 };
    let answers = 0;
    const api = fakeApi({
      "GET /api/v1/jobs/q1/": queued,
      "GET /api/v1/jobs/q1/events/": [],
      "GET /api/v1/jobs/q1/attempts/": [],
      "PATCH /api/v1/jobs/q1/": (body: unknown) => {
        answers += 1;
        return answers === 1
          ? [400, { max_wall_time: ["VC vision allows at most 7 d (604800 seconds); asked for 8 d (691200 seconds)."] }]
          : [200, { ...queued, ...(body as object) }];
      },
    });
    renderPage(<JobDetailPage />, "/jobs/q1", "/jobs/:id", { ...MEMBER, vcs: [{ name: "vision", role: "admin" }] });
    const form = await screen.findByRole("form", { name: "Change the job" });
    fireEvent.change(within(form).getByLabelText("Wall time (minutes)"), { target: { value: "11520" } });
    await userEvent.click(within(form).getByRole("button", { name: "Change" }));
    const refusal = await within(form).findByText(/allows at most 7 d/);
    expect(refusal.closest(".field")).toContainElement(within(form).getByLabelText("Wall time (minutes)"));
    fireEvent.change(within(form).getByLabelText("Wall time (minutes)"), { target: { value: "60" } });
    fireEvent.change(within(form).getByLabelText("Retries"), { target: { value: "0" } });
    await userEvent.click(within(form).getByRole("button", { name: "Change" }));
    expect(await within(form).findByText("Saved: wall time 1h 00m, 0 retries, priority 0.")).toBeInTheDocument();
    const patches = api.calls.filter((call) => call.method === "PATCH");
    expect(patches[1].body).toEqual({ priority: 0, max_wall_time: 3600, max_retries: 0 });
  });

  it("shows no change form to a member", async () => {
    fakeApi({ "GET /api/v1/jobs/q2/": { ...FAILED, id: "q2", status: "queued" }, "GET /api/v1/jobs/q2/events/": [], "GET /api/v1/jobs/q2/attempts/": [] });
    renderPage(<JobDetailPage />, "/jobs/q2", "/jobs/:id");
    await screen.findByLabelText("Spec");
    expect(screen.queryByRole("form", { name: "Change the job" })).not.toBeInTheDocument();
  });

  it("follows a running job's log from where it left off, and shows how to reach the job", async () => {
    const VSCODE_R1 = "vscode://vscode-remote/ssh-remote+mia+r1@gateway:2222/srv/trainyard/local-backend/r1/work";
    const offsets: (string | null)[] = [];
    const chunks = ["epoch 1\n", "epoch 2\n", "epoch 3\n"];
    fakeApi({
      "GET /api/v1/jobs/r1/": {
        ...FAILED, id: "r1", status: "running", exit_code: null, failure_class: "", repair_message: "",
        status_message: "running on a100-1", finished_at: null,
        endpoints: {
          ssh: "ssh -p 2222 mia+r1@gateway", vscode: VSCODE_R1,
          ssh_config: "Host trainyard-r1\n  HostName gateway\n  Port 2222\n  User mia+r1\n",
          host_key_fingerprint: "SHA256:abcdef",
          ports: [{ name: "jupyter", port: 8888, url: "http://portal/endpoints/r1/jupyter/" }],
        },
      },
      "GET /api/v1/jobs/r1/events/": [],
      "GET /api/v1/jobs/r1/attempts/": [],
      "GET /api/v1/jobs/r1/log/tail/": (_body: unknown, url: URL) => {
        offsets.push(url.searchParams.get("offset"));
        const index = offsets.length - 1;
        return [200, { text: chunks[index] ?? "", next_offset: 8 * Math.min(index + 1, 3), size: 24, complete: index >= 2 }];
      },
    });
    renderPage(<JobDetailPage />, "/jobs/r1", "/jobs/:id");
    expect(await screen.findByText("ssh -p 2222 mia+r1@gateway")).toBeInTheDocument();
    // The job's own directory, as the API says, not "/".
    expect(screen.getByRole("link", { name: "Open in VS Code" })).toHaveAttribute("href", VSCODE_R1);
    expect(screen.getByRole("link", { name: "Open jupyter" })).toHaveAttribute("href", "http://portal/endpoints/r1/jupyter/");
    expect(screen.getByLabelText("SSH config")).toHaveTextContent("Host trainyard-r1 HostName gateway Port 2222 User mia+r1");
    expect(screen.getByText("SHA256:abcdef")).toBeInTheDocument();
    expect(screen.getByRole("form", { name: "Expose a port" })).toBeInTheDocument();
    await waitFor(() => expect(screen.getByLabelText("Log")).toHaveTextContent("epoch 1 epoch 2 epoch 3"), { timeout: 4000 });
    expect(offsets).toEqual([null, "8", "16"]);
  });

  it("lets the owner expose a port of the running job", async () => {
    const running = { ...FAILED, id: "e1", status: "running", exit_code: null, failure_class: "", finished_at: null,
      endpoints: { ssh: "ssh -p 2222 mia+e1@gateway", ports: [] } };
    const api = fakeApi({
      "GET /api/v1/jobs/e1/": running,
      "GET /api/v1/jobs/e1/events/": [],
      "GET /api/v1/jobs/e1/attempts/": [],
      "GET /api/v1/jobs/e1/log/tail/": [200, { text: "", next_offset: 0, size: 0, complete: false }],
      "POST /api/v1/jobs/e1/ports/": [200, { ...running, ports: [{ name: "tensorboard", port: 6006 }] }],
    });
    renderPage(<JobDetailPage />, "/jobs/e1", "/jobs/:id");
    await userEvent.type(await screen.findByLabelText("Port name"), "tensorboard");
    await userEvent.type(screen.getByLabelText("Port"), "6006");
    await userEvent.click(screen.getByRole("button", { name: "Expose" }));
    await waitFor(() => expect(api.calls.some((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/e1/ports/")).toBe(true));
    const posted = api.calls.find((call) => call.method === "POST" && call.url.pathname === "/api/v1/jobs/e1/ports/");
    expect(posted?.body).toEqual({ name: "tensorboard", port: 6006 });
  });

  it("charts the GPU utilisation of the job's GPUs when metrics exist, and leaves it out when not", async () => {
    const running = { ...FAILED, id: "g1", status: "running", exit_code: null, failure_class: "", finished_at: null };
    fakeApi({
      "GET /api/v1/jobs/g1/": running,
      "GET /api/v1/jobs/g1/events/": [],
      "GET /api/v1/jobs/g1/attempts/": [],
      "GET /api/v1/jobs/g1/log/tail/": { text: "", next_offset: 0, size: 0, complete: false },
      "GET /api/v1/jobs/g1/metrics/": {
        available: true, message: "", step_seconds: 15, mean: 49,
        series: [
          { attempt: 2, node: "a100-3", gpu: 0, points: [[1764410400, 90], [1764410415, 88]] },
          { attempt: 2, node: "a100-3", gpu: 1, points: [[1764410400, 10], [1764410415, 8]] },
        ],
      },
      "GET /api/v1/usage/gpu-hours/": (_body: unknown, url: URL) => [200, {
        results: url.searchParams.get("job") === "g1" && url.searchParams.get("group_by") === "job"
          ? [{ key: "g1", booked_gpu_hours: 8, used_gpu_hours: 3.9, idle_gpu_hours: 4.1, borrowed_gpu_hours: 0, used_unavailable_reason: "" }]
          : [],
      }],
    });
    renderPage(<JobDetailPage />, "/jobs/g1", "/jobs/:id");
    const chart = await screen.findByRole("img", { name: /GPU utilisation of 2 GPU\(s\), mean 49 %/ });
    expect(chart.querySelectorAll("polyline")).toHaveLength(2);
    expect(screen.getByText("a100-3 GPU 1")).toBeInTheDocument();
    expect(await screen.findByLabelText("GPU-hours")).toHaveTextContent("GPU-hours: 8 booked, 3.9 used, 4.1 idle");

  });

  it("leaves the chart out when there are no metrics, without an error", async () => {
    const running = { ...FAILED, id: "g2", status: "running", exit_code: null, failure_class: "", finished_at: null };
    const api = fakeApi({
      "GET /api/v1/jobs/g2/": running,
      "GET /api/v1/jobs/g2/events/": [],
      "GET /api/v1/jobs/g2/attempts/": [],
      "GET /api/v1/jobs/g2/log/tail/": { text: "", next_offset: 0, size: 0, complete: false },
      "GET /api/v1/jobs/g2/metrics/": { available: false, message: "No metrics source is configured.", step_seconds: 0, series: [], mean: null },
    });
    renderPage(<JobDetailPage />, "/jobs/g2", "/jobs/:id");
    await waitFor(() => expect(api.calls.map((call) => call.url.pathname)).toContain("/api/v1/jobs/g2/metrics/"));
    expect(await screen.findByLabelText("Spec")).toBeInTheDocument();
    expect(screen.queryByRole("heading", { name: "GPU utilisation" })).not.toBeInTheDocument();
    expect(screen.queryByRole("alert")).not.toBeInTheDocument();
  });

  it("says whether a waiting job is predicted to make its deadline, and whether an ended one made it", async () => {
    const queued = {
      ...FAILED, id: "d1", status: "queued", exit_code: null, failure_class: "", started_at: null,
      finished_at: null, deadline: "2026-11-29T12:00:00Z", deadline_forecast: false,
    };
    const ended = { ...FAILED, id: "d2", status: "finished", exit_code: 0, failure_class: "", deadline: "2026-11-29T12:00:00Z", deadline_forecast: true };
    for (const job of [queued, ended]) {
      fakeApi({
        [`GET /api/v1/jobs/${job.id}/`]: job,
        [`GET /api/v1/jobs/${job.id}/events/`]: [],
        [`GET /api/v1/jobs/${job.id}/attempts/`]: [],
        [`GET /api/v1/jobs/${job.id}/log/tail/`]: { text: "", next_offset: 0, size: 0, complete: true },
      });
      const { unmount } = renderPage(<JobDetailPage />, `/jobs/${job.id}`, "/jobs/:id");
      const verdict = job === queued ? "predicted to miss it" : "met";
      expect(await screen.findByLabelText("Deadline")).toHaveTextContent(`(${verdict})`);
      unmount();
    }
    fakeApi({
      "GET /api/v1/jobs/f1/": FAILED,
      "GET /api/v1/jobs/f1/events/": [],
      "GET /api/v1/jobs/f1/attempts/": [],
      "GET /api/v1/jobs/f1/log/tail/": { text: "", next_offset: 0, size: 0, complete: true },
    });
    renderPage(<JobDetailPage />, "/jobs/f1", "/jobs/:id");
    expect(await screen.findByLabelText("Spec")).toBeInTheDocument();
    expect(screen.queryByLabelText("Deadline")).not.toBeInTheDocument();
  });

  it("shows an elastic job's range, its booked and borrowed workers, the admission answer and the warnings", async () => {
    const elastic = {
      ...FAILED, id: "e1", status: "running", exit_code: null, failure_class: "", finished_at: null,
      workers: 4, min_workers: 2, max_workers: 4, borrowing: false,
      placement: [0, 1, 2].map((rank) => ({ rank, node: "a100-1", gpus: [rank], cpus: 8, memory: 65536 })),
      deadline: "2026-11-29T12:00:00Z", deadline_forecast: false, admission: "flagged", admission_share: null,
      earliest_finish: "2026-11-29T13:00:00Z", throughput: [100, 190, 270, 340], work: 1000000,
      warnings: ["This job is elastic (min_workers < max_workers) but its command shows no checkpointing: each resize restarts it from the beginning."],
    };
    fakeApi({
      "GET /api/v1/jobs/e1/": elastic,
      "GET /api/v1/jobs/e1/events/": [],
      "GET /api/v1/jobs/e1/attempts/": [],
      "GET /api/v1/jobs/e1/log/tail/": { text: "", next_offset: 0, size: 0, complete: true },
    });
    renderPage(<JobDetailPage />, "/jobs/e1", "/jobs/:id");
    expect(await screen.findByLabelText("Elastic")).toHaveTextContent("2..4 workers; now 3: 2 booked, 1 borrowed");
    expect(screen.getByLabelText("Admission")).toHaveTextContent(/cannot meet its deadline: the earliest finish was .*; accepted and flagged/);
    expect(screen.getByLabelText("Warning")).toHaveTextContent("each resize restarts it from the beginning");
  });
});
